"""The sandbox policy of the grader (hvdcourse/course/grading/audit.py): what student code may read, write, run."""

import json
import os
import subprocess
import sys

import pytest

from hvdcourse.course.grading.audit import ENV, Policy


@pytest.fixture
def layout(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "ex01.ipynb").write_text("{}")
    (tmp_path / "sandbox").mkdir()
    return tmp_path, Policy(str(tmp_path / "sandbox"), [str(tmp_path / "solutions")])


def test_opening_a_solution_is_a_violation(layout):
    root, policy = layout
    assert policy.check("open", (str(root / "solutions" / "ex01.ipynb"), "r", 0)) == (
        "read-solutions",
        str(root / "solutions" / "ex01.ipynb"),
    )


def test_a_symlink_inside_the_sandbox_does_not_hide_the_target(layout):
    root, policy = layout
    os.symlink(root / "solutions", root / "sandbox" / "innocent")
    assert (
        policy.check("open", (str(root / "sandbox" / "innocent" / "ex01.ipynb"), "r", 0))[0]
        == "read-solutions"
    )


def test_listing_the_solutions_folder_is_a_violation(layout):
    root, policy = layout
    assert policy.check("os.listdir", (str(root / "solutions"),))[0] == "read-solutions"


def test_writing_inside_the_sandbox_is_allowed(layout):
    root, policy = layout
    assert (
        policy.check("open", (str(root / "sandbox" / "out.txt"), "w", os.O_WRONLY | os.O_CREAT))
        is None
    )


def test_writing_outside_the_sandbox_is_a_violation(layout):
    root, policy = layout
    assert policy.check("open", (str(root / "elsewhere.txt"), "w", 0))[0] == "write-outside"
    assert policy.check("os.remove", (str(root / "elsewhere.txt"), None))[0] == "write-outside"


def test_reading_outside_the_denied_folders_is_allowed(layout):
    _, policy = layout
    assert policy.check("open", (sys.executable, "rb", 0)) is None


def test_a_program_whose_arguments_name_the_solutions_is_a_violation(layout):
    root, policy = layout
    args = ["cat", str(root / "solutions" / "ex01.ipynb")]
    assert policy.check("subprocess.Popen", ("cat", args, None, None))[0] == "read-solutions"
    assert policy.check("os.system", (f"cat {root}/solutions/ex01.ipynb",))[0] == "read-solutions"


def test_hook_in_a_real_process_denies_and_logs(layout):
    root, _ = layout
    log = root / "violations.jsonl"
    spec = json.dumps(
        {"workdir": str(root / "sandbox"), "deny": [str(root / "solutions")], "log": str(log)}
    )
    code = (
        "from hvdcourse.course.grading import audit; audit.install()\n"
        f"try:\n    open({str(root / 'solutions' / 'ex01.ipynb')!r}).read()\n"
        "except PermissionError as err:\n    print('denied:', err)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, **{ENV: spec}),
        cwd=root / "sandbox",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "denied: [grader] open" in run.stdout
    assert json.loads(log.read_text().splitlines()[0])["kind"] == "read-solutions"
