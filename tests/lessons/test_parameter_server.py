"""hvdcourse.course.lessons.parameter_server: the parameter-server step returns exactly the workers'
sum on every rank; bad input says what to do.

The stale-gradient simulation is run and its claims asserted by lesson 03's own cells in the book
build; only its input check is tested here."""

import re

import pytest

from conftest import PYTHON
from hvdcourse.course.lessons.parameter_server import parameter_server_allreduce, stale_sgd
from hvdcourse.runtime.errors import UsageError
from hvdcourse.runtime.launch import run_ranks


def test_the_step_gives_every_rank_exactly_the_workers_sum_with_the_server_in_the_middle():
    run = run_ranks(
        [
            PYTHON,
            "-m",
            "hvdcourse.course.lessons.parameter_server",
            "--length",
            "7",
            "--server",
            "1",
        ],
        np=3,
        launcher="mpirun",
        timeout=120,
    )
    assert run.ok, run.output[-3000:]
    lines = re.findall(r"\[ps\] rank=\d size=3 length=7 exact=\w+", run.output)
    assert len(lines) == 3 and all(line.endswith("exact=True") for line in lines), run.output


class _OneRank:
    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1


def test_a_job_of_one_rank_is_told_to_start_a_server_and_a_worker():
    with pytest.raises(UsageError, match="at least 2 ranks"):
        parameter_server_allreduce(_OneRank(), [1.0])


def test_a_negative_delay_is_refused_with_the_values_given():
    with pytest.raises(UsageError, match="delay >= 0"):
        stale_sgd(None, delay=-1)
