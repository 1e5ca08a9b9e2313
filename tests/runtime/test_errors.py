"""Library code raises typed errors; every command turns them into ONE line ``hvdcourse: error: ...``
and the exit code documented in hvdcourse/runtime/errors.py and the README (2: fix your input,
3: a run failed or timed out). One test per family of commands; the trainers' and the launcher's
bad input is in tests/examples/test_faults_bad_input.py, the data preparation's in
tests/examples/test_data.py."""

import os
import re
import signal
import subprocess
import time

import psutil
import pytest

from conftest import PYTHON, ROOT
from hvdcourse.runtime import errors


def one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith(errors.PREFIX)]
    assert len(lines) == 1 and "Traceback" not in text, text[-3000:]
    return lines[0]


def command(args, timeout=120):
    proc = subprocess.run(
        [PYTHON, "-m", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_course_error_is_one_line_with_its_exit_code(capsys):
    def main(argv):
        raise errors.MissingToolError("srun not found\non PATH; load your site's Slurm module")

    assert errors.run_cli(main, []) == errors.USER_ERROR
    err = capsys.readouterr().err
    assert err == "hvdcourse: error: srun not found on PATH; load your site's Slurm module\n"


@pytest.mark.parametrize(
    "error, code",
    [
        (errors.UsageError("x"), 2),
        (errors.RunFailed("x"), 3),
        (errors.RunTimeout("x"), 3),
        (errors.CheckFailed("x"), 1),
    ],
)
def test_each_kind_of_error_has_its_documented_exit_code(error, code, capsys):
    def main(argv):
        raise error

    assert errors.run_cli(main) == code
    assert capsys.readouterr().err == "hvdcourse: error: x\n"


def test_a_rank_that_stops_because_of_rank_0_prints_nothing(capsys):
    def main(argv):
        raise errors.StoppedWithRank0(errors.UsageError("rank 0 says why"))

    assert errors.run_cli(main) == 2
    assert capsys.readouterr().err == ""


def test_a_bug_keeps_its_traceback():
    def main(argv):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        errors.run_cli(main)


def test_envcheck_with_an_unknown_launcher_gives_one_error_line():
    code, out = command(
        ["hvdcourse.course.check.envcheck", "--ranks", "2", "--launchers", "gloo,slurm"]
    )
    assert code == 2
    assert "unknown controller(s) slurm" in one_error_line(out)


def test_grader_on_a_missing_folder_gives_one_error_line(tmp_path):
    code, out = command(
        ["hvdcourse.course.grading.grader", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]
    )
    assert code == 2
    assert "is not a folder" in one_error_line(out)


def test_book_build_of_a_missing_lesson_gives_one_error_line():
    code, out = command(
        ["hvdcourse.course.book.book_build", "--execute", "notebooks/99_nothing.md"]
    )
    assert code == 2
    assert "no lesson file notebooks/99_nothing.md" in one_error_line(out)


def test_bench_suite_with_zero_rounds_gives_one_error_line(tmp_path):
    code, out = command(["hvdcourse.course.bench.suite", "--rounds", "0", "--out", str(tmp_path)])
    assert code == 2
    assert "--rounds must be at least 1" in one_error_line(out)
    assert not os.listdir(tmp_path)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.timeout(120)
def test_sigterm_stops_a_launch_and_its_mpi_ranks():
    # the ranks run in their own session (run_ranks), so only the launcher's cleanup can end them
    sleeper = "import os, time; print('rank pid', os.getpid(), flush=True); time.sleep(300)"
    launch = subprocess.Popen(
        [PYTHON, "-m", "hvdcourse.runtime.launch", "-np", "2", "--launcher", "mpirun"]
        + ["--timeout", "100", "--", PYTHON, "-c", sleeper],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    ranks, seen = [], []
    try:
        while len(ranks) < 2:
            line = launch.stdout.readline()
            assert line, "the launcher ended before both ranks started:\n" + "".join(seen)
            seen.append(line)
            ranks += [int(pid) for pid in re.findall(r"rank pid (\d+)", line)]
        launch.send_signal(signal.SIGTERM)
        out = "".join(seen) + launch.communicate(timeout=30)[0]
    finally:
        if launch.poll() is None:
            launch.kill()
    assert launch.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "terminated (SIGTERM)" in one_error_line(out)
    deadline = time.monotonic() + 15
    while any(_alive(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in ranks if _alive(pid)], f"ranks left after SIGTERM: {ranks}"
