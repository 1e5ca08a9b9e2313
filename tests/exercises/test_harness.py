"""Running a learner's function on ranks (hvdcourse/course/exercises/harness.py): errors, hangs, files per rank."""

import os

from hvdcourse.course.exercises.harness import describe_failure, run_on_ranks
from hvdcourse.runtime import processes


def test_each_rank_runs_in_its_own_folder_and_returns_its_value():
    def write_and_return(n, rank, size):
        open(f"from-rank-{rank}.txt", "w").close()
        return [rank, size, n]

    outcome = run_on_ranks("call", write_and_return, np=2, timeout=60, args=(7,))
    assert outcome.values() == [[0, 2, 7], [1, 2, 7]]
    assert outcome.files == {0: ["from-rank-0.txt"], 1: ["from-rank-1.txt"]}


def test_the_learner_function_cannot_find_or_write_the_results_channel():
    def forges_a_result(n, rank, size):
        import os

        from hvdcourse.runtime.results import VARIABLE, report

        # 0, 0: the variable is hidden and report() writes nothing without it
        return [VARIABLE in os.environ, report({"ok": True, "value": [9]}) is not None]

    outcome = run_on_ranks("call", forges_a_result, np=2, timeout=60, args=(1,))
    assert outcome.values() == [[0, 0], [0, 0]]


def test_an_error_on_one_rank_is_reported_with_its_rank_and_line():
    def fails_on_rank_1(n, rank, size):
        if rank == 1:
            raise ValueError("only rank 1 fails")
        return [0]

    outcome = run_on_ranks("call", fails_on_rank_1, np=2, timeout=60, args=(1,))
    assert not outcome.all_ok
    message = describe_failure(outcome)
    assert message.startswith("rank 1 raised ValueError: only rank 1 fails")
    assert 'raise ValueError("only rank 1 fails")' in message


def test_a_hanging_rank_is_killed_at_the_timeout_with_no_process_left(monkeypatch):
    def hangs(n, rank, size):
        import time

        time.sleep(300 + n)

    # a marker only this run's launcher and ranks inherit: other graders or checks running on the
    # machine at the same time (their ranks look alike) are not this test's business
    marker = f"hang-{os.getpid()}-{os.urandom(4).hex()}"
    monkeypatch.setenv("HVDCOURSE_TEST_HANG", marker)
    outcome = run_on_ranks("call", hangs, np=2, timeout=8, args=(1,))
    assert outcome.timed_out and "did not finish in time" in describe_failure(outcome)
    assert processes.describe(processes.with_env("HVDCOURSE_TEST_HANG", marker)) == []


def test_sys_exit_in_the_learner_function_is_an_answer_not_a_crash():
    def exits(n, rank, size):
        import sys

        sys.exit("bye")

    outcome = run_on_ranks("call", exits, np=2, timeout=60, args=(1,))
    assert outcome.first_error()["error"] == "SystemExit: bye"


def test_a_function_that_cannot_be_pickled_is_explained():
    import threading

    lock = threading.Lock()

    def uses_a_lock(n, rank, size):
        with lock:
            return [rank]

    outcome = run_on_ranks("call", uses_a_lock, np=2, timeout=60, args=(1,))
    assert not outcome.all_ok and "cannot be sent to the ranks" in describe_failure(outcome)
