"""hvdcourse.runtime.launch: multi-process runs always end, and leave no process behind."""

import os
import re
import time

import psutil
import pytest

from conftest import PYTHON
from hvdcourse.runtime.launch import mend_tagged_lines, run_ranks

SLEEPER = "import os, time; print('rank up', os.getpid(), flush=True); time.sleep(600)"


@pytest.mark.timeout(180)  # ends the test if the killed ranks held run_ranks up
def test_hanging_ranks_are_killed_at_the_timeout():
    run = run_ranks([PYTHON, "-c", SLEEPER], np=2, launcher="mpirun", timeout=8)
    assert run.timed_out and run.returncode == 124
    assert run.seconds >= 8  # stopped by the timeout, not by the ranks
    assert "TIMEOUT" in run.output


def test_no_rank_survives_a_timeout(tmp_path):
    # Each rank records its PID in a file: output that mpirun has not forwarded yet is lost when it is
    # killed, so the output may miss a line.
    record = f"import os; open(os.path.join({str(tmp_path)!r}, str(os.getpid())), 'w').close(); "
    run = run_ranks([PYTHON, "-c", record + SLEEPER], np=2, launcher="mpirun", timeout=8)
    assert run.timed_out
    pids = [int(name) for name in os.listdir(tmp_path)]
    assert len(pids) == 2
    time.sleep(1)
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_output_is_capped():
    run = run_ranks(
        [PYTHON, "-c", "print('x' * 100000)"], np=1, launcher="python", timeout=30, max_output=1000
    )
    assert run.ok and len(run.output) <= 1000


def test_unknown_launcher_is_refused():
    import pytest

    with pytest.raises(ValueError, match="choose one of"):
        run_ranks(["true"], np=2, launcher="ssh")


# What mpirun --tag-output printed for two ranks that each wrote "a\nb\nc", then "d\n" (OpenMPI 4.1.4):
# a tag per piece read from a rank, so a line written in two pieces is split and glued to another rank's.
MPIRUN_PIECES = (
    "[1,0]<stdout>:a\n[1,0]<stdout>:b\n[1,0]<stdout>:c[1,1]<stdout>:a\n[1,1]<stdout>:b\n"
    "[1,1]<stdout>:c[1,0]<stdout>:d\n[1,1]<stdout>:d\n"
)


def test_lines_split_by_the_launcher_are_rejoined_per_rank():
    mended = mend_tagged_lines(MPIRUN_PIECES)
    assert mended.splitlines() == [
        "[1,0]<stdout>:a",
        "[1,0]<stdout>:b",
        "[1,1]<stdout>:a",
        "[1,1]<stdout>:b",
        "[1,0]<stdout>:cd",
        "[1,1]<stdout>:cd",
    ]
    assert sorted(untag(mended).splitlines()) == ["a", "a", "b", "b", "cd", "cd"]


def test_launcher_messages_and_unfinished_lines_are_kept():
    text = "mpirun: starting\n[1]<stdout>:x\nwarning from the launcher\n[1,0]<stderr>:no newline"
    assert mend_tagged_lines(text) == (
        "mpirun: starting\n[1]<stdout>:x\nwarning from the launcher\n[1,0]<stderr>:no newline\n"
    )


def untag(text: str) -> str:
    """horovodrun's output without its rank tags ("[1]<stdout>:", "[1,0]<stderr>:")."""
    return re.sub(r"\[\d+(?:,\d+)?\]<std(?:out|err)>:", "", text)


WRITES_IN_PIECES = (
    "import os, time; r = int(os.environ['OMPI_COMM_WORLD_RANK']); time.sleep(0.3 * r); "
    "os.write(1, f'rank={r} first half'.encode()); time.sleep(0.6); os.write(1, b' second half\\n')"
)


def test_run_ranks_output_has_whole_lines_when_ranks_write_in_pieces():
    run = run_ranks([PYTHON, "-c", WRITES_IN_PIECES], np=2, launcher="mpi", timeout=60)
    assert run.ok, run.output
    lines = sorted(line for line in untag(run.output).splitlines() if line.startswith("rank="))
    assert lines == ["rank=0 first half second half", "rank=1 first half second half"], run.output


def test_mpirun_output_has_whole_lines_and_no_tags_when_ranks_write_in_pieces():
    run = run_ranks([PYTHON, "-c", WRITES_IN_PIECES], np=2, launcher="mpirun", timeout=60)
    assert run.ok, run.output
    assert "<stdout>" not in run.output
    lines = sorted(line for line in run.output.splitlines() if line.startswith("rank="))
    assert lines == ["rank=0 first half second half", "rank=1 first half second half"], run.output
