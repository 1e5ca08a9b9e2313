"""Trivial answers earn at most a quarter of an exercise's points (issue 32.6).

Every exercise's check is run as the grader runs it, in its two halves: the answer run records what
the answers return (:class:`~hvdcourse.course.exercises.replay.Recorder`, with the grader's hidden
inputs), then the judge (:func:`hvdcourse.course.grading.judge.judge`) decides the points from that
data alone. Only the 2-rank runs are not started: each is answered here with what the course's driver
would report for such an answer on every rank (for a constant, the same value everywhere; for a
training answer, what the ranks observe of it), so the whole file takes seconds.

Trivial answers: no answer (None), a function that returns None, constants, the same value on every
rank, and the untouched notebook answer that returns something (its input, the single-worker set-up).
"""

from __future__ import annotations

import numpy as np
import pytest

from hvdcourse.course.exercises import checks, drivers, replay
from hvdcourse.course.grading import hidden
from hvdcourse.course.grading import judge as judging

CONSTANTS = (None, 0, 1.0, 0.5, "", [], {}, (1, 1), [0, 1], True)


def constant(value):
    def answer(*args, **kwargs):
        return value

    return answer


def error_record(rank, error="TypeError: not what the driver needs"):
    return {"rank": rank, "ok": False, "error": error, "type": error.split(":")[0]}


# ---------------------------------------------------------------- the ranks, answered in this process
class Dummy:
    """What a trivial answer gets for hvd or comm: it never uses them."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def allgather(self, obj):
        return [obj] * self.size  # the same value on every rank


def light_driver(driver, fn, rank, size, args):
    """The value the course's driver reports for ``fn`` on ``rank`` (drivers that need no framework)."""
    if driver == "call":
        return drivers.call(fn, rank, size, **args)
    if driver == "global_mean":
        return float(np.asarray(fn(Dummy(rank, size), drivers.local_values(rank, **args))))
    if driver == "ring":
        out = fn(Dummy(rank, size), drivers.ring_input(rank, args["length"]))
        if out is None:
            raise TypeError("returned None")
        return {"result": np.asarray(out, dtype=np.float64).ravel().tolist(), "sent": []}
    if driver == "column_parallel":
        shard_columns, layer = fn
        weight, bias, x = drivers.column_inputs(args["d_in"], args["d_out"], args["batch"])
        w, b = (np.asarray(a, dtype=np.float64) for a in shard_columns(weight, bias, rank, size))
        out = layer(Dummy(rank, size), x, w, b)
        return {"output": np.asarray(out, dtype=np.float64).tolist(), "calls": []}
    if driver == "pipeline_idle":
        from hvdcourse.course.lessons.model_parallel import pipeline

        fn = fn[-1]  # measured_idle_share, the second answer

        run = pipeline.simulate("gpipe", size, args["micro_batches"])
        ops = [tuple(op) for op in run["ops"][rank]]
        step = float(run["step_time"])
        return {"ops": [list(op) for op in ops], "step_time": step, "answer": float(fn(ops, step))}
    # a training driver: a constant is no model, optimizer or list of callbacks
    raise TypeError(f"{driver} needs a model, an optimizer or callbacks")


class SimulatedRanks(replay.Recorder):
    """The answer run's recorder, with each 2-rank run answered by ``ranks(driver, np, args, fn)``."""

    def __init__(self, ranks):
        super().__init__()
        self.ranks = ranks

    def observe(self, kind, name, args, compute):
        if kind != "ranks":
            return super().observe(kind, name, args, compute)
        return super().observe(
            kind, name, args, lambda: {"value": self.ranks(name, args["np"], args["args"])}
        )


def run_light(fn):
    """Ranks for the answer ``fn``: each runs the light driver, or reports what it raised."""

    def ranks(driver, np_, args):
        records = {}
        for rank in range(np_):
            try:
                value = light_driver(driver, fn, rank, np_, args)
                records[rank] = {"rank": rank, "ok": True, "value": value}
            except Exception as err:
                records[rank] = error_record(rank, f"{type(err).__name__}: {err}")
        return {"records": records, "files": {r: [] for r in range(np_)}}

    return ranks


def observed(per_rank, files=None):
    """Ranks whose driver observed ``per_rank(rank, args)`` (a training answer that returns something)."""

    def ranks(driver, np_, args):
        return {
            "records": {r: {"rank": r, "ok": True, "value": per_rank(r, args)} for r in range(np_)},
            "files": {r: list((files or {}).get(r, [])) for r in range(np_)},
        }

    return ranks


def graded(ex_id, answers, ranks=None):
    """The judge's result for ``answers``, recorded as the grader's answer run records them."""
    exercise = checks.EXERCISES[ex_id]
    if ranks is None:
        fns = [a for a in answers if callable(a)]
        ranks = run_light(fns[0] if len(fns) == 1 else tuple(fns))
    recorder = SimulatedRanks(ranks)
    static = {}
    for name, value in zip(exercise.answers, answers):
        if callable(value):
            static[name] = {"kind": "function", "placeholder": False}
        else:
            static[name] = {"kind": "literal", "value": replay.encode(value)}
    with replay.mode(recorder):
        exercise.check(*answers, quiet=True, **hidden.options(ex_id))
    job = {"exercises": [ex_id], "static": static, "answers": {"records": recorder.records}}
    return judging.judge(job)[0]


# ---------------------------------------------------------------- trivial answers, per exercise
def everywhere(answer_for_values):
    """An ex01 answer that gives every collective the same per-rank list."""
    return lambda values: {k: answer_for_values(values) for k in COLLECTIVE_KEYS}


COLLECTIVE_KEYS = ("allreduce", "allreduce_sum", "broadcast_from_1", "allgather")


def function_trivials(n_functions):
    """None itself, and every constant, for each of an exercise's functions at once."""
    yield "no answer", [None] * n_functions
    for value in CONSTANTS:
        yield f"returns {value!r}", [constant(value)] * n_functions


def example_phase_times():
    from hvdcourse.course.exercises import checks_tools, paths

    return checks_tools.reference_phase_times(paths.data_path(checks_tools.TIMELINE_FILE))


def own_values(values):
    return [list(v) for v in values]


TRIVIAL = {
    "ex01": [
        ("every rank keeps its own values", [everywhere(own_values)]),
        ("rank 0's values everywhere", [everywhere(lambda v: [list(v[0])] * len(v))]),
        ("rank 1's values everywhere", [everywhere(lambda v: [list(v[1])] * len(v))]),
        ("zeros everywhere", [everywhere(lambda v: [[0.0] * len(v[0])] * len(v))]),
    ],
    "ex02": [
        (
            "the example's mean, hard-coded",
            [constant(float(np.concatenate([drivers.local_values(r) for r in (0, 1)]).mean()))],
        ),
        ("its own mean on every rank", [lambda hvd, local: float(np.mean(local))]),
        ("its own sum on every rank", [lambda hvd, local: float(np.sum(local))]),
    ],
    "ex03": [
        ("every example on every rank", [lambda n, rank, size: list(range(n))]),
        ("its rank", [lambda n, rank, size: [rank]]),
        ("nothing", [lambda n, rank, size: []]),
        ("the first example", [lambda n, rank, size: [0]]),
    ],
    "ex04": [
        ("its own vector, untouched", [lambda comm, x: x]),
        ("zeros", [lambda comm, x: np.zeros_like(x)]),
    ],
    "ex08": [
        ("no phases", [lambda path: {}]),
        ("the example's totals, hard-coded", [constant(example_phase_times())]),
    ],
    "ex09": [
        (
            "one worker, the smallest batch",
            [lambda curve: {n: 1.0 for n in curve}, lambda curves, *a: (min(curves), 1)],
        ),
        (
            "all workers, the largest batch",
            [
                lambda curve: {n: 1.0 for n in curve},
                lambda curves, *a: (max(curves), max(curves[max(curves)])),
            ],
        ),
        (
            "the speedup",
            [lambda curve: {n: v / curve[1] for n, v in curve.items()}, constant(None)],
        ),
    ],
    "ex10": [
        ("an empty script", [constant("#!/bin/bash\n")]),
        (
            "the example's script, whatever the arguments",
            [
                constant(
                    "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --time=00:30:00\n"
                    "srun --mpi=pmix python -m hvdcourse.examples.train_hvd --epochs 3\n"
                )
            ],
        ),
    ],
    "ex11": [("the notebook's empty dict", [{}]), ("no answer", [None])],
    "ex12": [
        (
            "the whole layer on every rank",
            [lambda w, b, rank, size: (w, b), lambda comm, x, w, b: x @ w + b],
        )
    ],
    "ex13": [
        ("no bubble, no idle time", [constant(0.0), constant(0.0)]),
        ("the bubble of 2 stages, 4 micro-batches", [constant(0.2), constant(0.2)]),
        ("half", [constant(0.5), constant(0.5)]),
    ],
}


def ex11_trivials():
    """The same line for every kind (each line of the script), and every line for every kind."""
    from hvdcourse.course.exercises.checks_tools import BUG_KINDS, buggy_script_lines

    lines = range(1, len(buggy_script_lines()) + 1)
    for line in lines:
        yield f"every kind at line {line}", [{kind: line for kind in BUG_KINDS}]
    yield "every line for every kind", [{kind: list(lines) for kind in BUG_KINDS}]


# ---------------------------------------------------------------- training answers that return something
def _digest(rank):
    return f"weights-of-rank-{rank}"


def single_worker_conversion(rank, args):
    """train_hvd that returns an untrained model and all of MNIST (no step, no sharding)."""
    examples = [f"image{i}" for i in range(60)]
    value = {
        "digest": "untrained",
        "first_digest": None,
        "lrs": [],
        "batches": 0,
        "distributed": False,
        "examples": examples,
    }
    if rank == 0:
        value["all_examples"] = examples
    return value


def warmup_record(lr, distributed):
    def per_rank(rank, args):
        steps = args["epochs"] * args["steps_per_epoch"]
        return {
            "lrs": [lr] * steps,
            "digest": "moved" if distributed or lr == 0 else _digest(rank),
            "distributed": distributed,
            "steps_per_epoch": args["steps_per_epoch"],
            "optimizer": "SGD",
        }

    return per_rank


def no_callbacks(rank, args):
    """distributed_callbacks that returns []: the ranks start apart and report their own metrics."""
    logs = [{"loss": 1.0 + rank, "val_loss": 2.0 + rank}]
    return {"before": logs, "after": logs, "first_digest": _digest(rank), "digest": _digest(rank)}


def accumulation_record(lr, distributed):
    """A plain (or zero-rate) optimizer on the one-neuron model: it steps after every batch."""

    def per_rank(rank, args):
        k, micro = args["k"], args["micro_batch"]
        want = __import__(
            "hvdcourse.course.exercises.checks_scale", fromlist=["x"]
        ).accumulation_steps(2, k, micro, args["lr"])
        if lr == 0:
            weights = [want["start"].tolist()] * k
        else:
            x, y, kernel, bias = drivers.accumulation_inputs(rank, k * micro)
            w = np.concatenate([kernel.ravel(), bias]).astype(np.float64)
            weights = []
            for i in range(k):
                xs, ys = x[i * micro : (i + 1) * micro], y[i * micro : (i + 1) * micro]
                err = xs @ w[:-1] + w[-1] - ys[:, 0]
                w = w - lr * np.concatenate([2 * xs.T @ err / len(xs), [2 * err.mean()]])
                weights.append(w.tolist())
        return {"weights": weights, "distributed": distributed}

    return per_rank


def single_process_torch(same_order):
    """The PyTorch script's train_hvd returning an untrained model and a shuffling (or in-order) loader."""

    def per_rank(rank, args):
        n = 120
        order = list(range(n)) if same_order else list(np.random.default_rng(rank).permutation(n))
        return {
            "start": {"weights": "start", "optimizer": "start-opt", "entries": 8}
            if rank == 0
            else None,
            "built": [_digest(rank)],
            "first": {},
            "lrs": [],
            "losses": [],
            "digest": _digest(rank),
            "train_loss": 0.0,
            "sampler": "SequentialSampler" if same_order else "RandomSampler",
            "sampler_epoch": None,
            "indices": [int(i) for i in order],
            "n_train": n,
            "threads": 1,
        }

    return per_rank


TRAINING = {
    "ex05": [("an untrained model and all the data", observed(single_worker_conversion))],
    "ex06": [
        ("the single-worker optimizer, no callbacks", observed(warmup_record(0.01, False))),
        ("a zero learning rate, no callbacks", observed(warmup_record(0.0, False))),
    ],
    "ex07": [("no callbacks", observed(no_callbacks))],
    "ex14": [
        ("the single-worker optimizer", observed(accumulation_record(0.05, False))),
        ("a zero learning rate", observed(accumulation_record(0.0, False))),
    ],
    "ex15": [
        ("no training, a shuffling loader", observed(single_process_torch(False))),
        ("no training, the loader in order", observed(single_process_torch(True))),
    ],
}


def cases():
    for ex_id, exercise in checks.EXERCISES.items():
        if ex_id == "ex11":
            yield from ((ex_id, name, answers, None) for name, answers in ex11_trivials())
        else:
            for name, answers in function_trivials(len(exercise.answers)):
                yield ex_id, name, answers, None
        for name, answers in TRIVIAL.get(ex_id, []):
            yield ex_id, name, answers, None
        for name, ranks in TRAINING.get(ex_id, []):
            yield ex_id, name, [constant(None)] * len(exercise.answers), ranks


CASES = list(cases())


@pytest.mark.parametrize(
    "ex_id, name, answers, ranks", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_a_trivial_answer_earns_at_most_a_quarter_of_the_points(ex_id, name, answers, ranks):
    result = graded(ex_id, answers, ranks)
    assert result["score"] <= result["max_score"] / 4, [
        f["criterion"] for f in result["findings"] if f["passed"]
    ]


# ---------------------------------------------------------------- and right answers keep full marks
def solution_answers(ex_id):
    """The exercise's answers as its solution source defines them (the cells up to the answer cell)."""
    import os

    import jupytext

    from hvdcourse.course.exercises import markers, paths

    exercise = checks.EXERCISES[ex_id]
    notebook = jupytext.read(os.path.join(paths.SOURCE_DIR, exercise.name + ".md"))
    namespace = {"__name__": "__main__"}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        exec(markers.strip_markers(cell.source), namespace)
        if all(name in namespace for name in exercise.answers):
            return [namespace[name] for name in exercise.answers]
    raise AssertionError(f"{ex_id}: the source defines no {exercise.answers}")


@pytest.mark.parametrize("ex_id", ["ex01", "ex03", "ex08", "ex09", "ex10", "ex11", "ex13"])
def test_the_solution_gets_full_marks_on_the_graders_own_inputs_too(ex_id):
    """(The exercises whose 2-rank runs, if any, the light drivers above can stand in for; all of them
    are graded for real in tests/grading/test_grader.py. Exercise 11 has no inputs: its answer is data.)"""
    result = graded(ex_id, solution_answers(ex_id))
    assert result["score"] == result["max_score"], [
        (f["criterion"], f["detail"]) for f in result["findings"] if not f["passed"]
    ]
