"""EasyBuild and Lmod run on this machine: recipes, a dry run and a module file for the course's venv (lesson: Installing Horovod).

EasyBuild (``eb``) lives in its own venv in the course's cache (:func:`eb_venv` installs
``tools/easybuild_requirements.txt`` there on first use: the framework, its easyblocks and its
recipes, the easyconfigs); Lmod is Debian's package ``lmod``. Every command runs in a fresh ``bash`` that has
sourced Lmod's set-up, as a login shell on a cluster has, with a timeout:

* :func:`eb` runs ``eb ARGS`` with a throw-away install prefix (``EASYBUILD_PREFIX``), so nothing
  lands in the learner's home; as root it adds ``--allow-use-as-root-and-accept-consequences``
  (EasyBuild refuses root otherwise). ``offline=True`` points its downloads at a closed port of
  127.0.0.1, so that a fetch fails at once, as on a compute node without internet, and no traffic
  leaves the machine.
* :func:`write_venv_module` writes a Lua module file that puts a venv's ``bin`` first on ``PATH``
  and sets ``TF_USE_LEGACY_KERAS=1``; :func:`module` runs ``module use FOLDER`` and then Lmod
  commands on it (``module spider``, ``module load``).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
from importlib import metadata

from hvdcourse.runtime.errors import MissingToolError
from hvdcourse.runtime.paths import ROOT, cache_dir

REQUIREMENTS = os.path.join(ROOT, "tools", "easybuild_requirements.txt")
LMOD_INITS = ("/usr/share/lmod/lmod/init/bash", "/usr/share/lmod/6.6/init/bash")
# the easyconfig that the Large-scale Computation guide builds
GUIDE_EASYCONFIG = "Horovod-0.28.1-foss-2022a-CUDA-11.7.0-TensorFlow-2.11.0.eb"
CLOSED_PORT = "http://127.0.0.1:9"  # the discard port: nothing listens there


def eb_venv(install: bool = True) -> str:
    """The EasyBuild venv in the course's cache (keyed by its requirements file), installed on first
    use by ``tools/setup_easybuild.sh`` (1-2 minutes, once; one line says so) unless ``install`` is false."""
    with open(REQUIREMENTS, "rb") as fh:
        key = hashlib.sha256(fh.read()).hexdigest()[:8]
    venv = os.path.join(cache_dir(), f"easybuild-{key}")
    if not os.path.exists(os.path.join(venv, ".hvdcourse-ready")) and install:
        print(f"EasyBuild is not installed yet: installing it into {venv} (once, 1-2 minutes)")
        script = os.path.join(ROOT, "tools", "setup_easybuild.sh")
        proc = subprocess.run(
            ["bash", script],
            capture_output=True,
            text=True,
            timeout=1800,
            env={**os.environ, "HVDCOURSE_CACHE": cache_dir()},
        )
        if proc.returncode != 0:
            raise MissingToolError(
                f"EasyBuild could not be installed in {venv} (bash {script} failed: "
                f"{(proc.stderr.strip().splitlines() or ['no output'])[-1]})"
            )
    if not os.path.exists(os.path.join(venv, ".hvdcourse-ready")):
        raise MissingToolError(
            f"EasyBuild is not installed in {venv}: run 'bash tools/setup_easybuild.sh' "
            f"(it installs tools/easybuild_requirements.txt there)"
        )
    return venv


def lmod_init() -> str:
    """Lmod's bash set-up file: ``$LMOD_PKG/init/bash`` or Debian's."""
    candidates = (
        [os.path.join(os.environ["LMOD_PKG"], "init", "bash")] if os.environ.get("LMOD_PKG") else []
    )
    for path in (*candidates, *LMOD_INITS):
        if os.path.exists(path):
            return path
    raise MissingToolError(
        "Lmod is not installed: install the Debian package lmod (sudo apt-get install lmod; 'make env' does it as root)"
    )


def _bash(
    script: str, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``script`` in a bash that sourced Lmod's set-up; stdout and stderr merged (Lmod writes to stderr)."""
    full = f"source {shlex.quote(lmod_init())}\n{script}"
    return subprocess.run(
        ["bash", "-c", full],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def eb(
    args: list, prefix: str | None = None, offline: bool = False, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``eb ARGS`` (see the module's docstring); its output in ``.stdout``."""
    venv = eb_venv()
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.join(venv, "bin"), env.get("PATH", os.defpath)])
    env["EASYBUILD_PREFIX"] = prefix or tempfile.mkdtemp(prefix="hvdcourse-easybuild-")
    env.pop("PYTHONPATH", None)  # EasyBuild's own Python packages, not the course's
    if offline:
        for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            env[name] = CLOSED_PORT
        env.pop("no_proxy", None)
        env.pop("NO_PROXY", None)
    root = ["--allow-use-as-root-and-accept-consequences"] if os.geteuid() == 0 else []
    return _bash(" ".join(shlex.quote(a) for a in ["eb", *root, *args]), env=env, timeout=timeout)


def venv_versions(python: str = sys.executable) -> dict:
    """Horovod's and TensorFlow's versions in the venv of ``python`` (this one by default)."""
    if python == sys.executable:
        return {name: metadata.version(name) for name in ("horovod", "tensorflow")}
    code = (
        "from importlib import metadata as m; print(m.version('horovod'), m.version('tensorflow'))"
    )
    horovod, tensorflow = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    return {"horovod": horovod, "tensorflow": tensorflow}


def venv_module_name(versions: dict) -> str:
    """``Horovod/<version>-TensorFlow-<version>-venv``: EasyBuild's naming, marked as a venv."""
    return f"Horovod/{versions['horovod']}-TensorFlow-{versions['tensorflow']}-venv"


def venv_module_text(venv: str, versions: dict) -> str:
    """A Lua module file for the venv ``venv``."""
    bin_dir = os.path.join(venv, "bin")
    return f"""help([[
Horovod {versions["horovod"]} with TensorFlow {versions["tensorflow"]}: the course's venv {venv}
(built by 'make env'). Loading it puts the venv's python, horovodrun and hvdcourse-check first on PATH.
]])
whatis("Name: Horovod")
whatis("Version: {versions["horovod"]}")
whatis("Description: distributed deep learning with TensorFlow, PyTorch, MPI and Gloo (a venv)")
family("python_venv")
prepend_path("PATH", "{bin_dir}")
setenv("VIRTUAL_ENV", "{venv}")
-- tf.keras = tf-keras (Keras 2), which Horovod's Keras API needs, in every shell and job
setenv("TF_USE_LEGACY_KERAS", "1")
"""


def write_venv_module(folder: str, venv: str | None = None) -> str:
    """Write the venv's module file under ``folder`` (a module path); the module's name."""
    venv = venv or sys.prefix
    versions = venv_versions(os.path.join(venv, "bin", "python"))
    name = venv_module_name(versions)
    path = os.path.join(folder, name + ".lua")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(venv_module_text(venv, versions))
    return name


def module(folder: str, commands: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``module use FOLDER`` then ``commands`` (bash lines with ``module ...``), in a shell whose PATH
    does not hold the course's venv (as a fresh login shell)."""
    env = dict(os.environ)
    venv_bin = os.path.join(sys.prefix, "bin")
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", os.defpath).split(os.pathsep) if p != venv_bin
    )
    for name in ("VIRTUAL_ENV", "TF_USE_LEGACY_KERAS", "LOADEDMODULES", "_LMFILES_", "MODULEPATH"):
        env.pop(name, None)
    return _bash(f"module use {shlex.quote(folder)}\n{commands}", env=env, timeout=timeout)
