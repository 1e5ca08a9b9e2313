"""Checks of exercises 1-4: collectives, an exact global mean, sharding, a ring allreduce.

Lessons: Horovod's design, explored live; Converting a Keras MNIST script
to Horovod; Parameter servers and ring-allreduce.
"""

from __future__ import annotations

import numpy as np

from hvdcourse.course.exercises import drivers_basic
from hvdcourse.course.exercises.common import Stop, call, fmt, require_function
from hvdcourse.course.exercises.harness import describe_failure, run_on_ranks
from hvdcourse.course.exercises.result import check

COLLECTIVE_KEYS = ("allreduce", "allreduce_sum", "broadcast_from_1", "allgather")


# ------------------------------------------------------------------ exercise 1
def expected_collectives(values) -> dict:
    """What every rank holds after each collective, for ``values[r]`` held by rank r (numpy)."""
    arrays = [np.asarray(v, dtype=float) for v in values]
    size = len(arrays)
    per_rank = {
        "allreduce": np.mean(arrays, axis=0),
        "allreduce_sum": np.sum(arrays, axis=0),
        "broadcast_from_1": arrays[1],
        "allgather": np.concatenate(arrays),
    }
    return {k: [v.tolist()] * size for k, v in per_rank.items()}


def _same(got, want) -> bool:
    try:
        return len(got) == len(want) and all(
            np.shape(g) == np.shape(w) and np.allclose(np.asarray(g, dtype=float), w)
            for g, w in zip(got, want)
        )
    except (TypeError, ValueError):
        return False


def _length(value) -> int:
    try:
        return len(value)
    except TypeError:
        return -1


@check(
    "ex01",
    "Collectives: what every rank holds",
    {
        "shape": (
            "returns, for each collective, one result per rank (with at least two collectives right)",
            1,
        ),
        "allreduce": ("hvd.allreduce(x) with the default op", 1),
        "allreduce_sum": ("hvd.allreduce(x, op=hvd.Sum)", 1),
        "broadcast_from_1": ("hvd.broadcast(x, root_rank=1)", 1),
        "allgather": ("hvd.allgather(x)", 1),
    },
)
def ex01_collectives(c, after_collectives, hidden=()):
    """Exercise 1: ``after_collectives(values)`` predicts what every rank holds after each collective;
    ``hidden``: the grader's own cases, judged with these."""
    cases = [
        [[1.0, 2.0], [3.0, 4.0]],
        [[1.0], [2.0], [6.0]],
        [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0], [9.0, 10.0, 11.0]],
        *[[list(v) for v in case] for case in hidden],
    ]
    hints = {
        "allreduce": "Horovod's allreduce AVERAGES by default (op=hvd.Average), unlike MPI_Allreduce, which sums",
        "allreduce_sum": "op=hvd.Sum adds the vectors of all ranks element by element",
        "broadcast_from_1": "after a broadcast every rank holds the root's value, here rank 1's",
        "allgather": "allgather concatenates the ranks' tensors along the first axis, in rank order, "
        "and every rank gets the whole result",
    }
    require_function(c, after_collectives, "after_collectives")
    answers = [
        call(c, after_collectives, [list(v) for v in case], name="after_collectives")
        for case in cases
    ]
    bad = [
        a for a in answers if not isinstance(a, dict) or any(k not in a for k in COLLECTIVE_KEYS)
    ]
    if bad:
        bad = bad[0]
        c.stop(
            f"expected a dict with the keys {list(COLLECTIVE_KEYS)}, got {bad!r:.120}",
            "return {'allreduce': [...], 'allreduce_sum': [...], 'broadcast_from_1': [...], 'allgather': [...]}",
        )
        raise Stop
    shapes_ok = all(
        _length(a[k]) == len(case) for a, case in zip(answers, cases) for k in COLLECTIVE_KEYS
    )
    right = [
        key
        for key in COLLECTIVE_KEYS
        if all(_same(a[key], expected_collectives(case)[key]) for a, case in zip(answers, cases))
    ]
    if not shapes_ok:
        c.fail(
            "shape",
            "some entries do not have one result per rank "
            f"(for 3 ranks got lengths {[_length(answers[1][k]) for k in COLLECTIVE_KEYS]})",
            "a collective is called by every rank and leaves a result on every rank: return a list "
            "with one entry per rank, e.g. [result_on_rank0, result_on_rank1]",
        )
    else:  # the format earns its point only together with right values
        c.judge(
            "shape",
            len(right) >= 2,
            f"one result per rank, but {len(right)} collective(s) right: this point comes with two",
            "work out each collective from the values before you fill in the lists",
        )
    for key in COLLECTIVE_KEYS:
        wrong = [
            (case, a[key])
            for a, case in zip(answers, cases)
            if not _same(a[key], expected_collectives(case)[key])
        ]
        if not wrong:
            c.ok(key)
            continue
        case, got = wrong[0]
        want = expected_collectives(case)[key]
        hint = hints[key]
        if key == "allreduce" and _same(got, expected_collectives(case)["allreduce_sum"]):
            hint = "you summed: " + hints[key]
        if key == "allgather" and _same(got, [np.asarray(case).tolist()] * len(case)):
            hint = "the result is one flat vector (concatenation), not a list of the ranks' vectors"
        c.fail(key, f"for values={case} you said {got}, every rank holds {want}", hint)


# ------------------------------------------------------------------ exercise 2
@check(
    "ex02",
    "Collectives on 2 ranks: an exact global mean",
    {
        "runs": ("runs on 2 ranks and returns a number that combines both ranks' values", 1),
        "same": ("every rank returns the same combined value", 1),
        "exact": ("the value is the mean of all values of all ranks", 2),
    },
)
def ex02_global_mean(c, global_mean, timeout: float = 180, hidden=None):
    """Exercise 2: ``global_mean(hvd, local_values)`` on 2 ranks holding 3 and 7 values (``hidden``:
    the grader's own ``{"lengths": (n0, n1)}``, used instead)."""
    require_function(c, global_mean, "global_mean")
    lengths = tuple((hidden or {}).get("lengths", (3, 7)))
    args = {"lengths": lengths} if hidden else {}
    outcome = run_on_ranks("global_mean", global_mean, np=2, timeout=timeout, **args)
    if not outcome.all_ok:
        c.fail(
            "runs",
            describe_failure(outcome),
            "use hvd.allreduce(..., op=hvd.Sum) on every rank; a collective that one rank "
            "skips leaves the other waiting",
        )
        raise Stop
    try:
        got = [float(v) for v in outcome.values()]
    except (TypeError, ValueError):
        c.fail("runs", f"the ranks returned {outcome.values()!r:.80}, not numbers")
        raise Stop
    parts = [drivers_basic.local_values(r, lengths) for r in range(2)]
    everything = np.concatenate(parts)
    truth = float(everything.mean())
    mean_of_means = float(np.mean([p.mean() for p in parts]))
    agree = bool(np.allclose(got, got[0]))
    # a constant, or each rank's own statistic, is no combination: these points need a value that
    # only both ranks' data together give (the exact mean, or the average of the ranks' means)
    combined = agree and any(np.isclose(got[0], v) for v in (truth, mean_of_means))
    c.judge(
        "runs",
        combined,
        f"the ranks returned {fmt(got)}, which combines neither rank's values with the other's",
        "each rank only sees its own values: combine them with a collective (hvd.allreduce)",
    )
    c.judge(
        "same",
        combined,
        f"rank 0 returned {got[0]:g}, rank 1 returned {got[1]:g}"
        if not agree
        else f"every rank returned {got[0]:g}, a value that does not come from both ranks' values",
        "each rank only sees its own values: combine them with a collective so all ranks agree",
    )
    hint = "sum the values AND the counts over all ranks (op=hvd.Sum), then divide"
    if np.isclose(got[0], mean_of_means):
        hint = (
            "that is the average of the two ranks' means; the ranks hold different numbers of "
            "values, so their means do not weigh the same. " + hint
        )
    c.judge(
        "exact",
        all(np.isclose(g, truth) for g in got),
        f"expected {truth:g} on every rank, got {fmt(got)}",
        hint,
    )


# ------------------------------------------------------------------ exercise 3
def _shard_problems(shards: list, n: int) -> dict:
    """Which of disjoint / complete / balanced fail for the shards of ``range(n)`` (messages)."""
    problems = {}
    flat = [i for s in shards for i in s]
    size = len(shards)
    if len(flat) != len(set(flat)):
        dup = next(i for i in flat if flat.count(i) > 1)
        problems["disjoint"] = f"n={n}, {size} ranks: example {dup} is in more than one shard"
    elif size and min(len(s) for s in shards) < n // size:
        # disjoint because (nearly) empty is no split: a constant [] would pass
        problems["disjoint"] = (
            f"n={n}, {size} ranks: shard sizes {[len(s) for s in shards]}; each rank should get "
            f"at least n // size = {n // size} examples"
        )
    outside = sorted({i for i in flat if not 0 <= i < n})
    missing = sorted(set(range(n)) - set(flat))
    if outside or missing:
        what = (
            f"indices outside 0..{n - 1}: {fmt(outside)}"
            if outside
            else f"never used: {fmt(missing)}"
        )
        problems["complete"] = f"n={n}, {size} ranks: {what}"
    sizes = [len(s) for s in shards]
    if sizes and max(sizes) - min(sizes) > 1:
        problems["balanced"] = f"n={n}, {size} ranks: shard sizes {sizes}"
    return problems


def _indices(value) -> list:
    """The indices a shard_indices call returned, as ints; TypeError/ValueError if they are not."""
    return [int(i) for i in np.asarray(value).ravel()]


SHARD_HINTS = {
    "disjoint": "rank r can take indices r, r+size, r+2*size, ... (a stride), so no two ranks share one",
    "complete": "the last examples are easy to lose when n is not a multiple of size: check n=10, size=4",
    "balanced": "every rank runs the same number of steps; shards that differ by more than one example "
    "leave part of the larger one untrained, or give its rank extra steps that no other rank joins",
}
SHARD_CASES = [(n, size) for n in (0, 1, 5, 10, 1437) for size in (1, 2, 3, 4)]


@check(
    "ex03",
    "Shard a data set: disjoint and complete",
    {
        "disjoint": ("no example is in two shards, and each shard gets at least n // size", 1),
        "complete": ("together the shards cover every example", 1),
        "balanced": ("disjoint shards whose sizes differ by at most one", 1),
        "ranks": ("on 2 real ranks (2 processes) the shards are disjoint and complete", 1),
    },
)
def ex03_sharding(c, shard_indices, timeout: float = 180, hidden=None):
    """Exercise 3: ``shard_indices(num_examples, rank, size)`` gives disjoint, complete, balanced shards
    (``hidden``: the grader's own ``{"cases": [(n, size), ...], "ranks_n": n}``)."""
    require_function(c, shard_indices, "shard_indices")
    hidden = hidden or {}
    found = {}
    for n, size in SHARD_CASES + [tuple(case) for case in hidden.get("cases", ())]:
        shards = []
        for r in range(size):
            got = call(c, shard_indices, n, r, size, name="shard_indices")
            try:
                shards.append(_indices(got))
            except (TypeError, ValueError):
                c.stop(
                    f"shard_indices({n}, {r}, {size}) returned {got!r:.80}; expected a list "
                    "(or array) of integer indices",
                    "return e.g. list(range(rank, num_examples, size))",
                )
                raise Stop
        for key, message in _shard_problems(shards, n).items():
            found.setdefault(key, message)
    for key in ("disjoint", "complete"):
        c.judge(key, key not in found, found.get(key, ""), SHARD_HINTS[key])
    if "disjoint" in found:  # equal sizes are worth a point only for a real split
        c.fail("balanced", "the shards are not disjoint yet (see above)", SHARD_HINTS["disjoint"])
    else:
        c.judge(
            "balanced", "balanced" not in found, found.get("balanced", ""), SHARD_HINTS["balanced"]
        )
    n = int(hidden.get("ranks_n", 1437))
    outcome = run_on_ranks("call", shard_indices, np=2, timeout=timeout, args=(n,))
    if not outcome.all_ok:
        c.fail(
            "ranks",
            describe_failure(outcome),
            "the function must work in a fresh process too: define everything it needs inside it",
        )
        return
    try:
        problems = _shard_problems([_indices(v) for v in outcome.values()], n)
    except (TypeError, ValueError):
        problems = {"ranks": f"the ranks returned {outcome.values()!r:.80}"}
    c.judge(
        "ranks",
        not problems,
        "; ".join(problems.values()),
        "two processes must agree without talking: no unseeded randomness, no process ids; "
        "if you shuffle, use the same seed on every rank",
    )


# ------------------------------------------------------------------ exercise 4
RING_FORBID = (
    "hvdcourse.course.lessons.ring",
    "horovod",
    "horovod.tensorflow",
    "horovod.tensorflow.keras",
)


def _ring_run(c, fn, np_: int, length: int, timeout: float):
    outcome = run_on_ranks("ring", fn, np=np_, timeout=timeout, forbid=RING_FORBID, length=length)
    if not outcome.all_ok:
        error = outcome.first_error() or {}
        hint = "follow the two phases: N-1 reduce-scatter steps, then N-1 allgather steps"
        if error.get("type") in ("ImportError", "ModuleNotFoundError"):
            hint = "write the ring yourself: the course's reference (hvdcourse.course.lessons.ring) and Horovod are not available here"
        elif "not available in this exercise" in error.get("error", ""):
            hint = "use comm.Sendrecv (or Send and Recv) with your left and right neighbours only"
        return None, describe_failure(outcome), hint
    return outcome, "", ""


@check(
    "ex04",
    "A ring allreduce with mpi4py",
    {
        "sum2": ("on 2 ranks every rank ends with the element-wise sum", 2),
        "neighbours": ("messages only go to the right or left neighbour", 1),
        "sum4": ("on 4 ranks (length not divisible by 4) every rank ends with the sum", 1),
        "traffic": ("each rank sends 2(N-1)/N of the vector, as a ring should", 1),
    },
)
def ex04_ring_allreduce(c, ring_allreduce, timeout: float = 180, hidden=None):
    """Exercise 4: ``ring_allreduce(comm, x)`` with point-to-point messages, on 2 then 4 ranks
    (``hidden``: the grader's own ``{"length": n}`` of the vectors, used instead of 3001)."""
    from hvdcourse.course.lessons.ring import ring_bytes_sent

    length = int((hidden or {}).get("length", 3001))
    require_function(c, ring_allreduce, "ring_allreduce")
    for np_, key in ((2, "sum2"), (4, "sum4")):
        outcome, problem, hint = _ring_run(c, ring_allreduce, np_, length, timeout)
        if outcome is None:
            c.fail(key, problem, hint)
            raise Stop
        truth = np.sum([drivers_basic.ring_input(r, length) for r in range(np_)], axis=0)
        bad = [
            r
            for r, v in enumerate(outcome.values())
            if len(v["result"]) != length or not np.allclose(v["result"], truth)
        ]
        got = outcome.values()[bad[0]]["result"] if bad else []
        if not c.judge(
            key,
            not bad,
            f"{np_} ranks: rank {bad[0] if bad else ''} ended with "
            f"{fmt(got)}, the sum starts with {fmt(truth)}",
            "in reduce-scatter ADD the received chunk to yours; in allgather REPLACE yours "
            "with the received one; send chunk (rank - step) % N each step",
        ):
            raise Stop
        strays = [
            (r, d)
            for r, v in enumerate(outcome.values())
            for d, _ in v["sent"]
            if d not in ((r + 1) % np_, (r - 1) % np_)
        ]
        if strays:
            c.fail(
                "neighbours",
                f"{np_} ranks: rank {strays[0][0]} sent to rank {strays[0][1]}",
                "in a ring each rank talks to (rank+1) % N and (rank-1) % N only",
            )
        elif np_ == 4:
            c.ok("neighbours")
        if np_ == 4:
            nbytes = length * 8
            sent = [sum(b for _, b in v["sent"]) for v in outcome.values()]
            ideal = ring_bytes_sent(nbytes, np_)
            c.judge(
                "traffic",
                sum(sent) <= 1.05 * np_ * ideal,
                f"the ranks sent {fmt(sent)} bytes; a ring sends {ideal:.0f} per rank "
                f"(the vector is {nbytes} bytes)",
                "send one chunk (1/N of the vector) per step, never the whole vector",
            )
