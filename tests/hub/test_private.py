"""The answer keys out of learners' reach (hvdcourse/course/hub/private.py): with the keys closed as
``hub start`` closes them, a real learner account, running the learners' kernel interpreter, cannot
read the solutions, the exercise sources, the sample submissions, the grader's keys or its hidden
inputs, and its self-checks still work.

Needs root (a Unix account is made and removed) and the hub's installation (tools/setup_hub.sh: a
no-op once installed). The modes of the clone's folders are put back afterwards.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from conftest import ROOT
from hvdcourse.course.grading import keys
from hvdcourse.course.hub import accounts, private, setup

KEYS_DIR = os.path.dirname(keys.__file__)


@pytest.fixture(scope="module")
def learner(hub_install):
    """A learner's account (home in a temporary folder) and the learners' interpreter, with the keys
    closed; afterwards the account is removed and the clone's modes restored."""
    python = setup.Install().kernel_python()
    base = tempfile.mkdtemp(prefix="hvdkeys-")
    os.chmod(base, 0o755)
    name = f"hvdkeys{os.urandom(2).hex()}"
    saved = private.modes(private.places(ROOT, (private.kernel_package(python),)))
    try:
        accounts.create(name, base)
        closed = private.close(python=python)
        yield {"name": name, "home": pwd.getpwnam(name).pw_dir, "python": python, "closed": closed}
    finally:
        private.restore(saved)
        subprocess.run(["userdel", "-r", name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def as_learner(learner, code: str) -> subprocess.CompletedProcess:
    """``code`` run by the learners' interpreter as the learner, from their home."""
    env = {"PATH": "/usr/bin:/bin", "HOME": learner["home"], "TF_USE_LEGACY_KERAS": "1"}
    return subprocess.run(
        [shutil.which("runuser"), "-u", learner["name"], "--", learner["python"], "-c", code],
        capture_output=True,
        text=True,
        cwd=learner["home"],
        env=env,
        timeout=300,
    )


def test_every_place_of_a_key_is_closed_to_group_and_others(learner):
    closed_names = {os.path.relpath(p, ROOT) for p in learner["closed"]}
    assert closed_names >= {
        "solutions",
        os.path.join("exercises", "source"),
        "tests",
        ".git",
        os.path.join("hvdcourse", "course", "grading", "keys"),
    }
    assert all(os.stat(p).st_mode & 0o077 == 0 for p in learner["closed"])


def test_a_learner_cannot_read_the_solutions_sources_submissions_or_history(learner):
    files = [
        os.path.join(ROOT, "solutions", "ex11_find_the_bug.ipynb"),
        os.path.join(ROOT, "exercises", "source", "ex11_find_the_bug.md"),
        os.path.join(ROOT, "tests", "grading", "submissions", "alice"),
        os.path.join(ROOT, ".git", "HEAD"),
        os.path.join(KEYS_DIR, "__init__.py"),
    ]
    code = (
        "import json, os, sys\n"
        "out = {}\n"
        f"for path in {files!r}:\n"
        "    try:\n"
        "        os.listdir(path) if os.path.isdir(path) else open(path).read()\n"
        "        out[path] = 'read'\n"
        "    except OSError as err:\n"
        "        out[path] = type(err).__name__\n"
        "print(json.dumps(out))\n"
    )
    proc = as_learner(learner, code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert set(json.loads(proc.stdout).values()) == {"PermissionError"}, proc.stdout


def test_a_learner_cannot_import_the_keys_or_load_the_hidden_inputs(learner):
    code = (
        "import json\n"
        "out = {}\n"
        "try:\n"
        "    from hvdcourse.course.grading import keys\n"
        "    out['keys'] = sorted(k for k in vars(keys) if not k.startswith('__'))\n"
        "except Exception as err:\n"
        "    out['keys'] = type(err).__name__\n"
        "from hvdcourse.course.grading import hidden\n"
        "try:\n"
        "    hidden.options('ex03')\n"
        "    out['hidden'] = 'loaded'\n"
        "except PermissionError as err:\n"
        "    out['hidden'] = str(err)\n"
        "print(json.dumps(out))\n"
    )
    proc = as_learner(learner, code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    # a folder the learner cannot read imports as an empty namespace package, or not at all
    assert out["keys"] in ([], "PermissionError", "ModuleNotFoundError"), out
    assert "cannot be read here" in out["hidden"], out


def test_no_file_a_learner_can_read_in_the_package_holds_exercise_11s_key(learner):
    """Stale bytecode included: an older checks_tools.pyc carried the lines' regexes."""
    needles = sorted(keys.BUG_PATTERNS.values())
    package = os.path.join(ROOT, "hvdcourse")
    code = (
        "import json, os\n"
        f"needles = [n.encode() for n in {needles!r}]\n"
        "found = []\n"
        f"for folder, _, files in os.walk({package!r}):\n"
        "    for name in files:\n"
        "        path = os.path.join(folder, name)\n"
        "        try:\n"
        "            data = open(path, 'rb').read()\n"
        "        except OSError:\n"
        "            continue\n"
        "        found += [path for n in needles if n in data][:1]\n"
        "print(json.dumps(found))\n"
    )
    proc = as_learner(learner, code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == []


def test_a_learners_self_check_of_exercise_11_still_tells_right_from_wrong(learner):
    right = {kind: lines[0] for kind, lines in keys.bug_answers().items()}
    wrong = {"unscaled-lr": 1, "undefined-name": 1}  # line 1 opens the docstring
    code = (
        "import json\n"
        "from hvdcourse.course.exercises import checks\n"
        f"right = checks.ex11_bugs({right!r}, quiet=True)\n"
        f"wrong = checks.ex11_bugs({wrong!r}, quiet=True)\n"
        "print(json.dumps([right.score, right.max_score, wrong.score]))\n"
    )
    proc = as_learner(learner, code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    right_score, max_score, wrong_score = json.loads(proc.stdout.splitlines()[-1])
    assert right_score == max_score == len(right)
    assert wrong_score == 0


def test_a_learners_self_check_of_exercise_9_still_runs(learner):
    code = (
        "import json\n"
        "from hvdcourse.course.exercises import checks\n"
        "def scaling_efficiency(curve):\n"
        "    return {n: curve[n] / (n * curve[1]) for n in curve}\n"
        "def choose_setup(curves, floor, cap):\n"
        "    eff = scaling_efficiency\n"
        "    ok = [(ips, b, n) for b, c in curves.items() for n, ips in c.items()\n"
        "          if b * n <= cap and eff(c)[n] >= floor]\n"
        "    return max(ok)[1:]\n"
        "result = checks.ex09_scaling(scaling_efficiency, choose_setup, quiet=True)\n"
        "print(json.dumps([result.score, result.max_score]))\n"
    )
    proc = as_learner(learner, code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    score, max_score = json.loads(proc.stdout.splitlines()[-1])
    assert score == max_score
