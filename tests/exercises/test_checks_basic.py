"""Checks of exercises 1-4 (hvdcourse/course/exercises/checks_basic.py): wrong answers get the intended findings."""

import numpy as np

from hvdcourse.course.exercises import checks_basic as checks


def failed(result):
    return {f.criterion for f in result.findings if not f.passed}


def finding(result, text_start):
    return next(f for f in result.findings if f.criterion.startswith(text_start))


def summed_collectives(values):
    arrays = np.asarray(values, dtype=float)
    size = len(values)
    return {
        "allreduce": [arrays.sum(0).tolist()] * size,
        "allreduce_sum": [arrays.sum(0).tolist()] * size,
        "broadcast_from_1": [arrays[1].tolist()] * size,
        "allgather": [arrays.reshape(-1).tolist()] * size,
    }


def test_ex01_summing_allreduce_loses_one_point_with_the_average_hint(capsys):
    result = checks.ex01_collectives(summed_collectives)
    assert (result.score, result.max_score) == (4, 5)
    assert (
        "Horovod's allreduce AVERAGES by default" in finding(result, "hvd.allreduce(x) with").hint
    )
    assert "[FAIL] hvd.allreduce(x) with the default op" in capsys.readouterr().out


def test_ex01_nested_allgather_gets_the_concatenation_hint():
    def nested(values):
        answer = summed_collectives(values)
        answer["allgather"] = [np.asarray(values, dtype=float).tolist()] * len(values)
        return answer

    assert (
        "concatenation"
        in finding(checks.ex01_collectives(nested, quiet=True), "hvd.allgather").hint
    )


def test_ex01_error_in_the_answer_is_reported_without_a_traceback(capsys):
    def broken(values):
        return values[10]

    result = checks.ex01_collectives(broken)
    out = capsys.readouterr().out
    assert result.score == 0 and "raised IndexError: list index out of range" in result.problem
    assert "Traceback" not in out and "return values[10]" in out


def test_ex01_placeholder_means_not_done():
    def after_collectives(values):
        raise NotImplementedError("Exercise 1: predict")

    assert checks.ex01_collectives(after_collectives, quiet=True).status == "not-done"


def test_ex01_passing_a_value_instead_of_the_function_is_explained():
    result = checks.ex01_collectives({"allreduce": []}, quiet=True)
    assert "pass the function itself" in result.problem_hint


def test_ex01_a_dict_without_the_keys_is_explained():
    result = checks.ex01_collectives(lambda values: {"sum": 1}, quiet=True)
    assert "expected a dict with the keys" in result.problem


def test_ex03_contiguous_blocks_that_drop_the_remainder_are_incomplete():
    def shard_indices(n, rank, size):
        per = n // size
        return list(range(rank * per, (rank + 1) * per))

    result = checks.ex03_sharding(shard_indices, quiet=True)
    assert failed(result) == {
        "together the shards cover every example",
        "on 2 real ranks (2 processes) the shards are disjoint and complete",
    }
    assert "never used" in finding(result, "together").detail


def test_ex03_shuffle_seeded_by_process_passes_alone_but_fails_on_two_ranks():
    def shard_indices(n, rank, size):
        import os

        import numpy as np

        return np.random.default_rng(os.getpid()).permutation(n)[rank::size]

    result = checks.ex03_sharding(shard_indices, quiet=True)
    assert failed(result) == {"on 2 real ranks (2 processes) the shards are disjoint and complete"}
    assert "same seed on every rank" in finding(result, "on 2 real ranks").hint


def test_ex04_whole_vector_passing_is_correct_but_sends_too_much():
    def ring_allreduce(comm, x):
        rank, size = comm.Get_rank(), comm.Get_size()
        total, passing = np.array(x, dtype=float), np.array(x, dtype=float)
        for _ in range(size - 1):
            incoming = np.empty_like(passing)
            comm.Sendrecv(
                passing, dest=(rank + 1) % size, recvbuf=incoming, source=(rank - 1) % size
            )
            total += incoming
            passing = incoming
        return total

    result = checks.ex04_ring_allreduce(ring_allreduce, quiet=True)
    assert failed(result) == {"each rank sends 2(N-1)/N of the vector, as a ring should"}


def test_ex04_all_to_all_exchange_talks_to_non_neighbours():
    def ring_allreduce(comm, x):
        rank, size = comm.Get_rank(), comm.Get_size()
        total = np.array(x, dtype=float)
        for offset in range(1, size):
            incoming = np.empty_like(total)
            comm.Sendrecv(
                np.array(x, dtype=float),
                dest=(rank + offset) % size,
                recvbuf=incoming,
                source=(rank - offset) % size,
            )
            total += incoming
        return total

    result = checks.ex04_ring_allreduce(ring_allreduce, quiet=True)
    assert "messages only go to the right or left neighbour" in failed(result)


def test_ex04_collectives_are_switched_off_with_a_clear_hint():
    def ring_allreduce(comm, x):
        return comm.allreduce(x)

    result = checks.ex04_ring_allreduce(ring_allreduce, quiet=True)
    sum2 = finding(result, "on 2 ranks")
    assert "comm.allreduce is not available" in sum2.detail and "Sendrecv" in sum2.hint


def test_ex04_importing_the_course_reference_is_refused():
    def ring_allreduce(comm, x):
        from hvdcourse.course.lessons.ring import ring_allreduce as reference

        return reference(comm, x)

    result = checks.ex04_ring_allreduce(ring_allreduce, quiet=True)
    assert "write the ring yourself" in finding(result, "on 2 ranks").hint
