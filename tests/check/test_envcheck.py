"""hvdcourse-check: the environment check the course asks learners to run first.

Its full run on 2 ranks (Gloo and MPI, TensorFlow and PyTorch) is lesson 16's, in the book build: the
lesson's cell asserts what these tests asserted of it (it passed; every part built; two ranks that
agree under each controller with each framework). Running it here as well cost CI about 100 s for
the same checks."""

import glob
import json
import os
import subprocess
from importlib import metadata


from conftest import PYTHON, ROOT


def test_horovodrun_check_build_lists_tensorflow_pytorch_mpi_and_gloo(check_build_report):
    out = check_build_report
    for needed in ("[X] TensorFlow", "[X] PyTorch", "[X] MPI", "[X] Gloo"):
        assert needed in out, out


def horovod_without_pytorch(folder):
    """This venv's Horovod seen without its PyTorch extension: a tree of links to the installed
    package, less horovod/torch/mpi_lib_v2*.so (what a build without HOROVOD_WITH_PYTORCH leaves)."""
    import horovod

    source = os.path.dirname(horovod.__file__)
    os.makedirs(folder / "horovod" / "torch")
    for name in os.listdir(source):
        if name != "torch":
            os.symlink(os.path.join(source, name), folder / "horovod" / name)
    for name in os.listdir(os.path.join(source, "torch")):
        if not name.startswith("mpi_lib_v2"):
            os.symlink(os.path.join(source, "torch", name), folder / "horovod" / "torch" / name)
    return folder


def test_a_horovod_without_its_pytorch_extension_fails_the_check_with_the_fix(tmp_path):
    shadow = horovod_without_pytorch(tmp_path)
    proc = subprocess.run(
        [PYTHON, "-m", "hvdcourse.course.check.envcheck"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": f"{shadow}{os.pathsep}{ROOT}"},
        cwd=str(tmp_path),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[ ] PyTorch" in proc.stdout and "extension: NOT built" in proc.stdout
    installed = json.loads(metadata.distribution("horovod").read_text("direct_url.json"))["url"]
    entry = os.path.dirname(installed[len("file://") :])  # the wheel cache entry make env used
    assert glob.glob(os.path.join(entry, "horovod-*.whl"))
    problems = [line for line in proc.stderr.splitlines() if line.startswith("  - ")]
    assert problems == [
        "  - Horovod was built without its PyTorch extension (torch==2.13.0 is pinned): delete "
        f"{entry} and run 'make env'"
    ]


def test_pytorch_is_optional_where_the_course_does_not_pin_it(tmp_path):
    from hvdcourse.course.check.envcheck import pinned_version, torch_report

    unpinned = tmp_path / "requirements.txt"
    unpinned.write_text("tensorflow==2.20.0\nnumpy==2.2.6\n")
    lines, problems = torch_report(False, "0.28.1", str(unpinned))
    assert problems == [] and lines[0].endswith("(Horovod's PyTorch extension: NOT built)")
    assert pinned_version("torch", str(unpinned)) is None
    assert pinned_version("torch") == "2.13.0"  # the course's own requirements.txt


def test_a_host_name_that_does_not_resolve_is_reported_before_gloo_crashes():
    from hvdcourse.course.check.envcheck import hostname_problems

    assert hostname_problems("localhost") == []
    problems = hostname_problems("no-such-host.invalid")
    assert len(problems) == 1
    assert "'no-such-host.invalid' does not resolve" in problems[0] and "/etc/hosts" in problems[0]
