"""pyproject.toml: the package declares the very pins that requirements.txt (what tools/setup_env.sh installs) lists."""

import os
import re

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the TOML reader that pip carries
    from pip._vendor import tomli as tomllib

from conftest import ROOT


def canonical(requirement: str) -> str:
    """'Tf_Keras == 2.20.1' -> 'tf-keras==2.20.1' (names compared as pip compares them)."""
    name, sep, version = requirement.replace(" ", "").partition("==")
    assert sep and version, (
        f"{requirement!r} is not pinned with '=='; the course pins every package"
    )
    return re.sub(r"[-_.]+", "-", name).lower() + "==" + version


def requirements_txt() -> set:
    lines = (line.split("#")[0].strip() for line in open(os.path.join(ROOT, "requirements.txt")))
    return {canonical(line) for line in lines if line}


def pyproject_pins() -> list:
    project = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]
    extras = project.get("optional-dependencies", {})
    return [
        canonical(r)
        for r in project.get("dependencies", []) + [r for group in extras.values() for r in group]
    ]


def test_pyproject_declares_each_requirement_once():
    pins = pyproject_pins()
    assert len(pins) == len(set(pins)), (
        f"declared twice in pyproject.toml: {sorted({p for p in pins if pins.count(p) > 1})}"
    )


def test_pyproject_and_requirements_txt_pin_the_same_versions():
    declared, installed = set(pyproject_pins()), requirements_txt()
    assert declared == installed, (
        "pyproject.toml ([project] dependencies and optional-dependencies) and requirements.txt differ; "
        f"change both: only in pyproject.toml: {sorted(declared - installed)}; "
        f"only in requirements.txt: {sorted(installed - declared)}"
    )
