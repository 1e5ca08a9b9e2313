"""hvdcourse-check: the environment check the course asks learners to run first."""

import subprocess

from conftest import PYTHON


def test_check_passes_on_two_ranks_with_gloo_and_mpi():
    proc = subprocess.run(
        [PYTHON, "-m", "hvdcourse.course.envcheck", "--ranks", "2"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "[X] TensorFlow" in out and "[X] MPI" in out and "[X] Gloo" in out
    for launcher in ("gloo", "mpi"):
        assert f"horovodrun --{launcher}" in out
    assert out.count("local_size=2 ") == 4  # two ranks under each controller
    assert "rank=1 local_rank=1 size=2" in out


def test_horovodrun_check_build_lists_tensorflow_mpi_and_gloo():
    import os
    import sys

    horovodrun = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    out = subprocess.run(
        [horovodrun, "--check-build"], capture_output=True, text=True, timeout=120
    ).stdout
    for needed in ("[X] TensorFlow", "[X] MPI", "[X] Gloo"):
        assert needed in out, out


def test_a_host_name_that_does_not_resolve_is_reported_before_gloo_crashes():
    from hvdcourse.course.envcheck import hostname_problems

    assert hostname_problems("localhost") == []
    problems = hostname_problems("no-such-host.invalid")
    assert len(problems) == 1
    assert "'no-such-host.invalid' does not resolve" in problems[0] and "/etc/hosts" in problems[0]
