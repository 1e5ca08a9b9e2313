"""The package's three layers (README, "Layout"): course > examples > runtime, imports only go down.

The contract is in ``pyproject.toml`` (``[tool.importlinter]``) and checked by ``lint-imports``
(import-linter, pinned in requirements.txt), which reads every import, also those inside functions.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

LAYERS = ("runtime", "examples", "course")
PACKAGE = os.path.join(ROOT, "hvdcourse")
LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def lint_imports(cwd: str) -> subprocess.CompletedProcess:
    if not os.path.isfile(LINT_IMPORTS):
        pytest.fail(
            f"{LINT_IMPORTS} is missing: install the pinned import-linter with "
            f"'{sys.executable} -m pip install -r requirements.txt' (or run 'make env')"
        )
    env = dict(os.environ, PYTHONPATH=cwd)
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_imports_only_go_down_the_layers():
    run = lint_imports(ROOT)
    assert run.returncode == 0, (
        f"lint-imports found an import that goes up a layer:\n{run.stdout}{run.stderr}"
    )


def _holds_python(folder: str) -> bool:
    """A folder with Python source (a folder left holding only __pycache__ by a move is not a module)."""
    return os.path.isdir(folder) and any(
        f.endswith(".py") for _, _, files in os.walk(folder) for f in files
    )


def test_every_module_belongs_to_a_layer():
    strays = sorted(
        name
        for name in os.listdir(PACKAGE)
        if name not in LAYERS + ("__init__.py", "__pycache__")
        and (name.endswith(".py") or _holds_python(os.path.join(PACKAGE, name)))
    )
    assert not strays, (
        f"hvdcourse/{', hvdcourse/'.join(strays)} belong(s) to no layer: move it into "
        f"hvdcourse/runtime, hvdcourse/examples or hvdcourse/course (README, 'Layout')"
    )


def test_an_upward_import_breaks_the_contract(tmp_path):
    """The contract is not vacuous: a runtime module that imports an example makes lint-imports fail."""
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    shutil.copytree(PACKAGE, tmp_path / "hvdcourse", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "hvdcourse" / "runtime" / "launch.py", "a") as fh:
        fh.write("\n\ndef _upward():\n    from hvdcourse.examples import train_hvd  # noqa: F401\n")
    run = lint_imports(str(tmp_path))
    assert run.returncode != 0, run.stdout
    assert "hvdcourse.runtime.launch -> hvdcourse.examples.train_hvd" in run.stdout, run.stdout


def _copy_with(tmp_path, module: str, line: str) -> subprocess.CompletedProcess:
    """lint-imports on a copy of the package where ``module`` (a path under hvdcourse/) gains a
    function that imports ``line``."""
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path)
    shutil.copytree(PACKAGE, tmp_path / "hvdcourse", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "hvdcourse" / module, "a") as fh:
        fh.write(f"\n\ndef _planted():\n    {line}  # noqa: F401\n")
    return lint_imports(str(tmp_path))


def test_a_circle_inside_a_function_breaks_the_contract(tmp_path):
    """The old circle, training <-> torch_training, hidden in a function-local import, is caught."""
    run = _copy_with(
        tmp_path, "examples/training.py", "from hvdcourse.examples import torch_training"
    )
    assert run.returncode != 0, run.stdout
    assert "no import circle" in run.stdout and "BROKEN" in run.stdout, run.stdout


def test_lesson_code_cannot_import_the_grader(tmp_path):
    """Inside course/: lesson code sits below the grader, so importing it upwards breaks a contract."""
    run = _copy_with(tmp_path, "course/lessons/ring.py", "from hvdcourse.course import grading")
    assert run.returncode != 0, run.stdout
    assert "hvdcourse.course.lessons.ring -> hvdcourse.course.grading" in run.stdout, run.stdout


def _package_docstring_names(init: str) -> set:
    import ast

    with open(init) as fh:
        doc = ast.get_docstring(ast.parse(fh.read())) or ""
    return set(re.findall(r":mod:`~?[\w.]*?\.?(\w+)`", doc))


def test_each_course_package_docstring_lists_what_is_there():
    """A package's docstring names each of its modules and subpackages (they drift otherwise)."""
    import glob

    missing = {}
    for init in glob.glob(os.path.join(PACKAGE, "course", "**", "__init__.py"), recursive=True):
        folder = os.path.dirname(init)
        present = {
            name[:-3] if name.endswith(".py") else name
            for name in os.listdir(folder)
            if not name.startswith("_")
            and (name.endswith(".py") or os.path.isfile(os.path.join(folder, name, "__init__.py")))
        }
        absent = present - _package_docstring_names(init)
        if absent:
            missing[os.path.relpath(folder, ROOT)] = sorted(absent)
    assert not missing, (
        f"package docstrings that do not name these modules (add a :mod: line): {missing}"
    )
