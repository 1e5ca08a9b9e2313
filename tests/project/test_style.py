"""The code's style is checked, not argued: ``ruff check`` and ``ruff format --check`` with the
settings in pyproject.toml (line length 100) pass on the whole repository."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

RUFF = os.path.join(os.path.dirname(sys.executable), "ruff")


def ruff(*args: str) -> subprocess.CompletedProcess:
    if not os.path.isfile(RUFF):
        pytest.fail(
            f"{RUFF} is missing: install the pinned ruff with "
            f"'{sys.executable} -m pip install -r requirements.txt' (or run 'make env')"
        )
    return subprocess.run([RUFF, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_no_lint_error():
    run = ruff("check", "--no-cache", ".")
    assert run.returncode == 0, (
        f"ruff check failed (fix, or 'ruff check --fix .'):\n{run.stdout}{run.stderr}"
    )


def test_every_python_file_is_formatted():
    run = ruff("format", "--check", "--no-cache", ".")
    assert run.returncode == 0, f"run 'ruff format .' on these files:\n{run.stdout}{run.stderr}"
