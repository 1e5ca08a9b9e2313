"""The grader run by an instructor who is not root (hvdcourse/course/grading/bwrap.py): the notebooks
run under bubblewrap, and the attacks that need the operating system's help (the course's files, /proc,
signals, forged score files, planted modules, limits) score nothing, as in test_hostile.py where the
grader is root; so does an escape past the audit hook through libc and the network.

Run as root, the module makes a Unix user of its own for the grader (removed after). The grader's
Python must be one other users can run: the course's venv, else the learners' kernel of the class hub
(tools/setup_hub.sh; a venv made from root's pyenv Python cannot be run by other users)."""

import glob
import hashlib
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grading_samples  # noqa: E402
import hostile_samples as hostile  # noqa: E402
from grading_run import grade  # noqa: E402

from hvdcourse.course.exercises import paths  # noqa: E402
from hvdcourse.course.grading import bwrap, grader  # noqa: E402
from hvdcourse.runtime.errors import UsageError  # noqa: E402

# a representative subset of test_hostile.py's attacks (the whole suite takes ~100 s)
ATTACKS = (
    "edit_course_files",
    "read_keys_from_proc",
    "kill_or_stop_the_checker",
    "forge_score_files",
    "patch_numpy_and_mpi4py",
    "fork_bomb_and_memory",
)
# the grader's environment has no /usr/sbin on its PATH
RUNUSER = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "runuser"
# what the escape cell prints when nothing got out
ESCAPE_HELD = (
    "escape: read class=no home=no keys=no solutions=no tests=no write course=no home=no out=no "
    "net=no"
)


def escape_cell(targets: dict, port: int) -> str:
    """An attack past the audit hook: libc's open() (the hook sees Python's opens only) on the
    solutions, the tests, another learner's notebook, the grader's home and its answer keys, writes into the course, the
    results and the grader's home, and a TCP connection to a server of the grader's machine; its
    error names what worked."""
    return f"""import ctypes, os, socket
libc = ctypes.CDLL(None)
seen = ["read"]
for what, path in {sorted(targets["read"].items())!r}:
    fd = libc.open(path.encode(), os.O_RDONLY)
    seen.append(f"{{what}}=" + ("yes" if fd >= 0 else "no"))
seen.append("write")
for what, path in {sorted(targets["write"].items())!r}:
    fd = libc.open(path.encode(), os.O_WRONLY | os.O_CREAT, 0o644)
    seen.append(f"{{what}}=" + ("yes" if fd >= 0 else "no"))
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
    seen.append("net=yes")
except OSError:
    seen.append("net=no")
raise RuntimeError("escape: " + " ".join(seen))
"""


def _course_digest():
    files = sorted(glob.glob(os.path.join(ROOT, "hvdcourse", "**", "*.py"), recursive=True))
    return hashlib.sha256(b"".join(open(f, "rb").read() for f in files)).hexdigest()


def runnable_by_others(path: str) -> bool:
    """True if every folder above ``path`` (followed to its file) may be entered by other users."""
    real = os.path.realpath(path)
    folder = os.path.dirname(real)
    while folder != "/":
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return False
        folder = os.path.dirname(folder)
    return bool(os.stat(real).st_mode & stat.S_IXOTH)


def grader_python(request) -> str:
    """A course Python the grader's user can run: this one, else the class hub's learners' kernel."""
    if runnable_by_others(sys.executable):
        return sys.executable
    from hvdcourse.course.hub.setup import PREFIX, Install

    def kernel_python() -> str:
        try:
            return Install(PREFIX).kernel_python()
        except RuntimeError:
            return ""

    python = kernel_python()
    if not (python and runnable_by_others(python)):
        request.getfixturevalue("hub_install")  # the hub's set-up makes one from /usr/bin/python3
        python = kernel_python()
    assert python and runnable_by_others(python), (
        f"no course Python that other users can run ({sys.executable} is under a closed folder, "
        f"and tools/setup_hub.sh gave {python or 'none'})"
    )
    return python


@pytest.fixture(scope="module")
def user(request):
    """A Unix user of its own for the grader, with a home folder; removed after with its processes."""
    if os.geteuid() != 0:
        pytest.fail("this test makes a Unix user for the grader: run it as root (make test does)")
    assert shutil.which("bwrap"), "no bwrap: install bubblewrap (tools/setup_env.sh does, as root)"
    assert bwrap.available(), (
        "bubblewrap cannot make its namespaces here (user namespaces disabled? "
        "/proc/sys/user/max_user_namespaces must be above 0)"
    )
    python = grader_python(request)
    name = f"hvdg{secrets.token_hex(3)}"
    top = os.path.join("/home", name)  # where an instructor's class and results would be
    os.makedirs(top, mode=0o700)
    subprocess.run(
        ["useradd", "--no-create-home", "--home-dir", top, "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    uid = pwd.getpwnam(name).pw_uid
    try:
        os.chown(top, uid, uid)
        yield SimpleNamespace(name=name, uid=uid, home=top, python=python)
    finally:
        from hvdcourse.course.grading import processes

        processes.kill_user(uid)
        subprocess.run(["userdel", name], capture_output=True)
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def graded(user):
    before = _course_digest()
    folder = os.path.join(user.home, "class")
    students = hostile.build(
        folder, grading_samples.BOB_EX01, {a: hostile.ATTACKS[a] for a in ATTACKS}
    )
    out = os.path.join(user.home, "out")
    secret = os.path.join(user.home, "secret.txt")
    with open(secret, "w") as fh:
        fh.write("the grader's own file\n")
    planted = {
        "course": os.path.join(ROOT, "hvdcourse", f"escape-{user.name}"),
        "out": os.path.join(out, "escape"),
        "home": os.path.join(user.home, "escape"),
    }
    targets = {
        "read": {
            "solutions": os.path.join(paths.SOLUTIONS_DIR, "ex01_collectives.ipynb"),
            "tests": os.path.abspath(__file__),
            "class": os.path.join(folder, "edit_course_files", "ex01_collectives.ipynb"),
            "home": secret,
            "keys": os.path.join(ROOT, bwrap.KEYS, "__init__.py"),
        },
        "write": planted,
    }
    server = socket.create_server(("127.0.0.1", 0))
    hostile.build(
        folder,
        grading_samples.BOB_EX01,
        {"escape_libc": escape_cell(targets, server.getsockname()[1])},
    )
    # dave's rich output, which the grader itself must interrupt (in the kernel, not bubblewrap)
    os.makedirs(os.path.join(folder, "output_cap"))
    shutil.copy(
        os.path.join(os.path.dirname(__file__), "submissions", "dave", "ex03_sharding.ipynb"),
        os.path.join(folder, "output_cap"),
    )
    os.makedirs(out)
    for top, dirs, files in os.walk(user.home):
        for name in [top] + [os.path.join(top, n) for n in dirs + files]:
            os.lchown(name, user.uid, user.uid)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": user.home}
    try:
        result = grade(
            folder,
            out,
            *("--jobs", "2", "--timeout", "120", "--cell-timeout", "30"),
            *("--mem-mb", "4096", "--nproc", "256", "--output-cap", "500"),
            env=env,
            timeout=1200,
            launcher=(RUNUSER, "-u", user.name, "--", user.python),
            cwd=ROOT,
        )
    finally:
        server.close()
    left = [p for p in planted.values() if os.path.exists(p)]
    for path in left:
        os.remove(path)
    return {
        **result,
        "students": students,
        "changed": _course_digest() != before,
        "planted": left,
        "user": user,
    }


def test_the_grader_says_it_runs_the_notebooks_under_bubblewrap(graded):
    assert "+ bubblewrap (" in graded["stdout"] and "no network" in graded["stdout"]


@pytest.mark.parametrize("attack", ATTACKS + ("escape_libc",))
def test_an_attack_on_a_grader_that_is_not_root_scores_zero(graded, attack):
    assert float(graded["rows"][attack]["ex01"]) == 0, graded["first"][attack]


def test_the_2_rank_checks_run_in_the_sandbox(graded):
    # bob's summed allreduce, whose checks run on 2 MPI ranks in the sandbox's own network
    assert float(graded["rows"]["patch_numpy_and_mpi4py_wrong"]["ex01"]) == 3


def test_libc_reaches_no_hidden_file_no_writable_folder_and_no_network(graded):
    report = graded["first"]["escape_libc"]
    assert [e["evalue"] for e in report["errors"]][:1] == [ESCAPE_HELD], report
    assert graded["planted"] == []


def test_the_course_files_are_unchanged_and_the_limits_hold(graded):
    assert not graded["changed"]
    assert graded["first"]["fork_bomb_and_memory"]["status"] in ("memory-limit", "process-limit")


def test_a_cell_past_the_output_cap_is_interrupted_not_killed(graded):
    report = graded["first"]["output_cap"]
    assert report["status"] == "output-cap" and "it was interrupted" in report["problem"], report


def test_no_process_of_the_grader_is_left(graded):
    from hvdcourse.course.grading import processes

    assert processes.owned_by(graded["user"].uid) == []


def test_without_a_sandbox_a_grader_that_is_not_root_refuses_unless_told(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(bwrap, "available", lambda: "")
    args = SimpleNamespace(no_hide=False, unsafe_no_sandbox=False)
    with pytest.raises(UsageError, match="no sandbox for the notebooks here.*--unsafe-no-sandbox"):
        grader.sandbox_of(args)
    args.unsafe_no_sandbox = True
    assert grader.sandbox_of(args) == "none"
    assert "run unconfined" in capsys.readouterr().out


def test_the_sandbox_writes_only_its_folder_and_hides_the_denied_ones(tmp_path):
    job = {"root": ROOT, "site": str(tmp_path / "site"), "deny": [paths.SOLUTIONS_DIR]}
    cmd = bwrap.command(job, str(tmp_path / "s0"), ["true"], exe="/usr/bin/bwrap")
    assert cmd[cmd.index("--") + 1 :] == ["true"]
    writable = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--bind"]
    assert writable == [str(tmp_path / "site" / "violations.jsonl"), str(tmp_path / "s0")]
    assert cmd[cmd.index(paths.SOLUTIONS_DIR) - 3 : cmd.index(paths.SOLUTIONS_DIR)] == [
        "--perms",
        "0000",
        "--tmpfs",
    ]
    keys = os.path.join(ROOT, bwrap.KEYS)
    if os.path.isdir(keys):  # the answer keys are covered even with --no-hide
        no_hide = bwrap.command(
            job, str(tmp_path / "s0"), ["true"], exe="/usr/bin/bwrap", hide=False
        )
        assert keys in cmd and keys in no_hide and paths.SOLUTIONS_DIR not in no_hide
    assert {"--unshare-all", "--die-with-parent", "--disable-userns"} <= set(cmd)
    assert ["--ro-bind", "/", "/"] == cmd[1:4] and "/tmp" in cmd and "/home" in cmd
