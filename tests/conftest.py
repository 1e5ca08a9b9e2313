"""Shared fixtures: the repository root, the venv's Python, offline data, a clean process table."""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable


@pytest.fixture
def run_dir(tmp_path):
    """A fresh working directory for a multi-rank run."""
    return str(tmp_path)
