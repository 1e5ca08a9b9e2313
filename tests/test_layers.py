"""The package's three layers (README, "Layout"): course > examples > runtime, imports only go down.

The contract is in ``pyproject.toml`` (``[tool.importlinter]``) and checked by ``lint-imports``
(import-linter, pinned in requirements.txt), which reads every import, also those inside functions.
"""

import os
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
