"""The container definitions stay in step with the set-up: container/Containerfile (Docker, Podman)
and container/hvdcourse.def (Apptainer) both run `make env` (tools/setup_env.sh) on the same base,
with the same prerequisites, environment and course files, on a Python the set-up accepts.

And the image is built and smoke-tested here, by `make container-check` (tools/container_check.sh):
Podman runs on this machine. The image is keyed by what its `make env` uses, like the Horovod wheel, so
a cold build (8 minutes on a quiet machine, 30 at load 20-30) happens once per change of the set-up or the pins; otherwise the suite
reuses it and runs only the smoke test on a copy of this checkout (84 s measured).
"""

import os
import re
import signal
import subprocess

import pytest

from conftest import ROOT

CONTAINERFILE = os.path.join(ROOT, "container", "Containerfile")
DEFINITION = os.path.join(ROOT, "container", "hvdcourse.def")
# the Python 3 of each base image's distribution (Debian 12: 3.11, Debian 13: 3.13)
DEBIAN_PYTHON = {"debian:12": "3.11", "debian:13": "3.13"}
ENV_VARS = ("VENV", "HVDCOURSE_CACHE", "TF_USE_LEGACY_KERAS")


def read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def containerfile_runs() -> list:
    """The Containerfile's RUN commands, continuation lines joined."""
    text = read(CONTAINERFILE).replace("\\\n", " ")
    return [line[4:] for line in text.splitlines() if line.startswith("RUN ")]


def definition_sections() -> dict:
    sections, name = {}, "header"
    for line in read(DEFINITION).splitlines():
        if line.startswith("%"):
            name = line[1:].strip()
            continue
        if line.strip() and not line.lstrip().startswith("#"):
            sections.setdefault(name, []).append(line.strip())
    return sections


def apt_packages(commands) -> set:
    return {
        pkg
        for command in commands
        for match in re.finditer(r"apt-get install -y --no-install-recommends ([^&\n]+)", command)
        for pkg in match.group(1).split()
    }


def containerfile_env() -> dict:
    text = read(CONTAINERFILE).replace("\\\n", " ")
    pairs = [p for line in text.splitlines() if line.startswith("ENV ") for p in line[4:].split()]
    return dict(pair.split("=", 1) for pair in pairs)


def test_both_images_run_the_courses_own_set_up():
    assert any(cmd.startswith("make env") for cmd in containerfile_runs())
    assert "make env" in definition_sections()["post"]
    makefile = read(os.path.join(ROOT, "Makefile"))
    assert "env:\n\t@bash tools/setup_env.sh" in makefile


def test_both_images_start_from_the_same_base():
    base = re.search(r"^ARG BASE=(\S+)$", read(CONTAINERFILE), re.MULTILINE).group(1)
    header = dict(line.split(":", 1) for line in definition_sections()["header"])
    assert header["Bootstrap"].strip() == "docker" and header["From"].strip() == base


def test_the_base_images_python_is_one_the_set_up_accepts():
    base = re.search(r"^ARG BASE=(\S+)$", read(CONTAINERFILE), re.MULTILINE).group(1)
    accepted = re.search(
        r'case "\$PYVER" in\s+([0-9.|]+)\)', read(os.path.join(ROOT, "tools", "setup_env.sh"))
    )
    assert DEBIAN_PYTHON[base] in accepted.group(1).split("|")


def test_both_images_install_the_same_prerequisites_before_the_set_up():
    from_containerfile = apt_packages(containerfile_runs())
    assert from_containerfile == apt_packages(definition_sections()["post"])
    # what the set-up cannot install itself: make runs it, a system Python needs its venv and headers
    assert {"make", "python3", "python3-venv", "python3-dev"} <= from_containerfile


def test_both_images_set_the_same_environment():
    env = containerfile_env()
    exported = dict(
        pair.split("=", 1)
        for line in definition_sections()["environment"]
        for pair in line.removeprefix("export ").split()
        if "=" in pair
    )
    post = " ".join(definition_sections()["post"])
    for name in ENV_VARS:
        assert exported[name] == env[name]
        assert f"{name}={env[name]}" in post  # the set-up in %post sees them too
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert exported["PATH"].startswith(f"{env['VENV']}/bin:")


def test_both_images_get_every_course_file_and_none_of_the_build_outputs():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    top = {name.split("/")[0] for name in tracked} - {"container"}
    top = {name for name in top if not name.startswith(".")}
    copied = {line.split()[0] for line in definition_sections()["files"]}
    assert copied == top
    ignored = {
        line.strip("/")
        for line in read(os.path.join(ROOT, ".dockerignore")).split()
        if not line.startswith("#")
    }
    git_ignored = {line.strip("/") for line in read(os.path.join(ROOT, ".gitignore")).split()}
    # the Containerfile copies the whole folder: what git ignores (venv, builds, runs) stays out too
    assert {p for p in git_ignored if p not in ignored and f"**/{p}" not in ignored} == set()
    assert {".git", ".venv", "_build"} <= ignored


def test_the_image_serves_the_lab_on_the_port_it_exposes():
    text = read(CONTAINERFILE)
    exposed = re.search(r"^EXPOSE (\d+)$", text, re.MULTILINE).group(1)
    command = re.search(r"^CMD (.+)$", text, re.MULTILINE).group(1)
    assert (
        '"make", "lab"' in command and f"--port {exposed}" in command and "--ip 0.0.0.0" in command
    )


def test_the_container_check_script_passes_shellcheck():
    proc = subprocess.run(
        ["shellcheck", "-x", os.path.join("tools", "container_check.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout


# a cold build (new set-up inputs) takes 8-30 minutes on 2 cores; the smoke test about 2
CHECK_TIMEOUT = 3600


@pytest.fixture(scope="module")
def container_check():
    proc = subprocess.Popen(
        ["bash", os.path.join(ROOT, "tools", "container_check.sh")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=CHECK_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # the script removes its container on the way out
        out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


@pytest.mark.timeout(CHECK_TIMEOUT + 300)
def test_the_image_builds_or_is_reused_for_the_same_set_up_inputs(container_check):
    code, out = container_check
    assert code == 0, out[-6000:]
    image = re.search(r"localhost/hvdcourse:env-([0-9a-f]{12})", out)
    assert image, out[-3000:]
    assert f"reusing {image.group(0)}" in out or f"Successfully tagged {image.group(0)}" in out


def test_make_check_passes_inside_the_image_with_every_framework_and_launcher(container_check):
    code, out = container_check
    assert code == 0, out[-6000:]
    for feature in ("TensorFlow", "PyTorch", "MPI", "Gloo"):
        assert f"[X] {feature}" in out, feature
    assert "OK: this environment is ready for the course." in out


def test_lesson_03_executes_inside_the_image_on_the_current_checkout(container_check):
    code, out = container_check
    assert code == 0, out[-6000:]
    assert re.search(r"executed notebooks/03_allreduce.md in [0-9.]+ s", out), out[-3000:]
    assert "container-check: OK:" in out


def test_the_images_command_serves_jupyterlab_behind_a_token_with_the_course_kernel(
    container_check,
):
    code, out = container_check
    assert code == 0, out[-6000:]
    assert (
        "lab: the image's command serves JupyterLab on port 8888 (HTTP 200 with the token, "
        "403 without), kernel /opt/hvdcourse/venv/bin/python" in out
    ), out[-3000:]


def test_no_container_of_the_check_is_left(container_check):
    proc = subprocess.run(
        ["podman", "ps", "-a", "--filter", "name=hvdcourse-smoke", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == ""
