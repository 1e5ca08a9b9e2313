"""The course's stack: TensorFlow 2.20 with tf-keras (Keras 2) and Horovod 0.28.1 built with the
course's patches (patches/horovod-0.28.1/). Every place that starts Python selects Keras 2, and a
script of the learner's own that forgets to gets one clear line instead of an error inside Horovod."""

import glob
import os
import shutil
import subprocess


from conftest import PYTHON, ROOT

PATCH_DIR = os.path.join(ROOT, "patches", "horovod-0.28.1")
PATCH_SCRIPT = os.path.join(ROOT, "tools", "patch_horovod.sh")


def without_keras_switch() -> dict:
    return {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}


def test_tf_keras_is_keras_2_from_tf_keras_in_the_course_environment():
    code = (
        "import hvdcourse, tensorflow as tf; from hvdcourse.course.check.envcheck import tf_keras_version; "
        "print(tf.__version__, tf.keras.__name__.split('.')[0], tf_keras_version(tf))"
    )
    out = subprocess.run(
        [PYTHON, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**without_keras_switch(), "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert out.returncode == 0, out.stderr
    tf_version, package, keras_version = out.stdout.split()
    assert (
        tf_version.startswith("2.20") and package == "tf_keras" and keras_version.startswith("2.20")
    )


def test_a_script_without_the_keras_switch_gets_one_clear_line():
    proc = subprocess.run(
        [PYTHON, "-c", "import horovod.tensorflow.keras"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**without_keras_switch(), "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ImportError: horovod.tensorflow.keras needs Keras 2, but tf.keras is Keras 3"
    )
    assert "export TF_USE_LEGACY_KERAS=1" in last and "tf-keras==2.20.*" in last
    assert "get_value" not in proc.stderr


def test_installed_horovod_carries_every_patch():
    import horovod

    keras_init = os.path.join(
        os.path.dirname(horovod.__file__), "tensorflow", "keras", "__init__.py"
    )
    callbacks = os.path.join(os.path.dirname(keras_init), "callbacks.py")
    for path in (keras_init, callbacks):
        text = open(path).read()
        assert (
            "from tensorflow.keras import backend as K" in text
            and "    from keras import backend" not in text
        )
    assert "(course patch)" in open(keras_init).read()


def test_launch_env_forces_keras_2_even_when_the_user_set_otherwise():
    from hvdcourse.runtime.mpienv import launch_env

    assert launch_env(base={"TF_USE_LEGACY_KERAS": "0"})["TF_USE_LEGACY_KERAS"] == "1"


def test_slurm_sites_export_the_keras_switch_to_every_rank():
    script = f"source {ROOT}/slurm/lib.sh && load_site cpu && env | grep ^TF_USE_LEGACY_KERAS="
    proc = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env=without_keras_switch(),
    )
    assert proc.stdout.strip() == "TF_USE_LEGACY_KERAS=1", proc.stderr


def test_patches_apply_to_horovods_source_and_say_what_they_do(horovod_source, tmp_path):
    tree = tmp_path / "horovod-0.28.1"
    shutil.copytree(horovod_source, tree)
    first = subprocess.run(
        ["bash", PATCH_SCRIPT, str(tree)], capture_output=True, text=True, timeout=60
    )
    assert first.returncode == 0, first.stderr
    patches = sorted(os.path.basename(p) for p in glob.glob(os.path.join(PATCH_DIR, "*.patch")))
    assert len(patches) == 7 and len(first.stdout.strip().splitlines()) == 7
    for name, line in zip(patches, first.stdout.splitlines()):
        headline = open(os.path.join(PATCH_DIR, name)).readline().strip()
        assert line == f"patch_horovod: applied {name}: {headline}"
    assert "set(CMAKE_CXX_STANDARD 17)" in (tree / "CMakeLists.txt").read_text()
    assert (
        "set(CMAKE_CXX_STANDARD 17)" in (tree / "horovod" / "torch" / "CMakeLists.txt").read_text()
    )
    assert (
        "if(HAVE_CUDA OR HAVE_ROCM)"
        in (tree / "horovod" / "tensorflow" / "CMakeLists.txt").read_text()
    )
    # a second run on the same tree changes nothing and says so
    again = subprocess.run(
        ["bash", PATCH_SCRIPT, str(tree)], capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and again.stdout.count("already applied") == 7, (
        again.stdout + again.stderr
    )


def test_each_patch_says_why(tmp_path):
    for path in sorted(glob.glob(os.path.join(PATCH_DIR, "*.patch"))):
        header = open(path).read().split("\n--- a/")[0]
        assert header.splitlines()[1].startswith("Why: "), path


def test_patch_script_refuses_a_folder_that_is_not_horovods_source(tmp_path):
    proc = subprocess.run(
        ["bash", PATCH_SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 1
    assert (
        proc.stderr.strip()
        == f"patch_horovod: ERROR: {tmp_path} is not an unpacked Horovod source tree"
    )


def test_check_build_reports_what_was_built_and_nothing_else(check_build_report):
    report = check_build_report
    assert "[X] TensorFlow" in report and "[X] MPI" in report and "[X] Gloo" in report
    # the course compiles Horovod's PyTorch extension too (patch 05 ticks it only when its library exists)
    assert "[X] PyTorch" in report
    assert "[ ] MXNet" in report  # not built, not claimed
