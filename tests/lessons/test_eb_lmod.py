"""hvdcourse.course.lessons.eb_lmod: clear messages when EasyBuild or Lmod is missing, and the venv's
module file. The EasyBuild and Lmod runs themselves are the install lesson's cells, asserted there."""

import pytest

from hvdcourse.course.lessons import eb_lmod
from hvdcourse.runtime.errors import MissingToolError, error_line


def test_a_missing_easybuild_venv_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HVDCOURSE_CACHE", str(tmp_path))
    with pytest.raises(MissingToolError) as err:
        eb_lmod.eb_venv(install=False)
    line = error_line(err.value)
    assert "\n" not in line and "EasyBuild is not installed" in line
    assert "tools/setup_easybuild.sh" in line


def test_a_failed_first_use_install_says_so_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HVDCOURSE_CACHE", str(tmp_path))
    monkeypatch.setenv(
        "PYTHON", str(tmp_path / "no-such-python")
    )  # the script cannot make its venv
    with pytest.raises(MissingToolError) as err:
        eb_lmod.eb_venv()
    line = error_line(err.value)
    assert "\n" not in line and "EasyBuild could not be installed" in line


def test_a_missing_lmod_says_which_package_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv("LMOD_PKG", raising=False)
    monkeypatch.setattr(eb_lmod, "LMOD_INITS", (str(tmp_path / "none"),))
    with pytest.raises(MissingToolError) as err:
        eb_lmod.lmod_init()
    assert "apt-get install lmod" in error_line(err.value)


def test_the_venv_module_puts_its_bin_first_and_sets_tf_use_legacy_keras():
    versions = {"horovod": "0.28.1", "tensorflow": "2.20.0"}
    text = eb_lmod.venv_module_text("/opt/venv", versions)
    assert eb_lmod.venv_module_name(versions) == "Horovod/0.28.1-TensorFlow-2.20.0-venv"
    assert 'prepend_path("PATH", "/opt/venv/bin")' in text
    assert 'setenv("TF_USE_LEGACY_KERAS", "1")' in text
