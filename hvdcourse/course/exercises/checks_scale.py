"""Checks of exercises 12-14: a column-parallel linear layer, the pipeline bubble predicted and
measured, and exact gradient accumulation with Horovod.

Lessons: Model parallelism by hand; Data parallelism at scale.
"""

from __future__ import annotations

import numpy as np

from hvdcourse.course.exercises import drivers_scale
from hvdcourse.course.exercises.common import Stop, call, fmt, require_function
from hvdcourse.course.exercises.harness import describe_failure, run_on_ranks
from hvdcourse.course.exercises.result import check

MODEL_PARALLEL_FORBID = (
    "hvdcourse.course.lessons.model_parallel.tensor_parallel",
    "horovod",
    "horovod.tensorflow",
    "horovod.tensorflow.keras",
)


# ------------------------------------------------------------------ exercise 12
def _columns(d_out: int, rank: int, size: int) -> slice:
    per = d_out // size
    return slice(rank * per, (rank + 1) * per)


@check(
    "ex12",
    "Write the column-parallel linear layer",
    {
        "shards": ("each rank keeps its own block of 1/N of the columns of W and b", 1),
        "output2": ("on 2 ranks every rank returns the whole x @ W + b", 2),
        "one_gather": ("one allgather of the local output, and no other collective", 1),
        "output4": ("on 4 ranks too", 1),
    },
)
def ex12_column_parallel(
    c, shard_columns, column_parallel_linear, timeout: float = 180, hidden=None
):
    """Exercise 12: ``shard_columns(weight, bias, rank, size)`` and
    ``column_parallel_linear(comm, x, weight_shard, bias_shard)`` on 2 then 4 ranks (``hidden``: the
    grader's own ``{"shards": [(d_in, d_out, size), ...]}`` for shard_columns)."""
    require_function(c, shard_columns, "shard_columns")
    require_function(c, column_parallel_linear, "column_parallel_linear")
    d_in, d_out, batch = 6, 8, 3
    truth_inputs = drivers_scale.column_inputs(d_in, d_out, batch)
    truth = truth_inputs[2] @ truth_inputs[0] + truth_inputs[1]
    wrong = None
    shard_cases = [(d_in, d_out, 2), (d_in, d_out, 4)]
    shard_cases += [tuple(case) for case in (hidden or {}).get("shards", ())]
    for d_in, d_out, size in shard_cases:
        weight, bias, _ = drivers_scale.column_inputs(d_in, d_out, batch)
        for r in range(size):
            got = call(c, shard_columns, weight.copy(), bias.copy(), r, size, name="shard_columns")
            cols = _columns(d_out, r, size)
            try:
                w_got, b_got = (np.asarray(a, dtype=np.float64) for a in got)
                ok = (
                    w_got.shape == (d_in, d_out // size)
                    and np.allclose(w_got, weight[:, cols])
                    and np.shape(b_got) == (d_out // size,)
                    and np.allclose(b_got, bias[cols])
                )
            except (TypeError, ValueError):
                w_got, ok = np.zeros(0), False
            if not ok and wrong is None:
                wrong = (size, r, w_got.shape, cols, d_in, d_out)
    if wrong:
        size, r, shape, cols, d_in, d_out = wrong
        hint = "rank r keeps weight[:, r*n:(r+1)*n] and bias[r*n:(r+1)*n] with n = d_out // size"
        if shape == (d_in // size, d_out):
            hint = "that is a block of ROWS: a column-parallel layer cuts W by columns (axis 1)"
        c.fail(
            "shards",
            f"{size} ranks: rank {r} kept a weight shard of shape {shape}; it should keep "
            f"columns {cols.start}..{cols.stop - 1} of W, shape {(d_in, d_out // size)}, "
            "and the same entries of b",
            hint,
        )
        raise Stop
    c.ok("shards")
    d_in, d_out = 6, 8
    for np_, key in ((2, "output2"), (4, "output4")):
        outcome = run_on_ranks(
            "column_parallel",
            (shard_columns, column_parallel_linear),
            np=np_,
            timeout=timeout,
            forbid=MODEL_PARALLEL_FORBID,
            d_in=d_in,
            d_out=d_out,
            batch=batch,
        )
        if not outcome.all_ok:
            error = outcome.first_error() or {}
            hint = "every rank computes x @ weight_shard + bias_shard, then one allgather joins the columns"
            if "not available in this exercise" in error.get("error", ""):
                hint = "gather the ranks' outputs with comm.allgather(local) and join them with np.concatenate(..., axis=1)"
            elif error.get("type") in ("ImportError", "ModuleNotFoundError"):
                hint = "write the layer yourself with NumPy: the course's tensor_parallel module and Horovod are off here"
            c.fail(key, describe_failure(outcome), hint)
            raise Stop
        values = outcome.values()
        bad = [
            r
            for r, v in enumerate(values)
            if np.shape(v["output"]) != truth.shape or not np.allclose(v["output"], truth)
        ]
        if bad:
            r = bad[0]
            got = np.asarray(values[r]["output"])
            hint = "compute x @ weight_shard + bias_shard on every rank, then join the N blocks of columns in rank order"
            if got.shape == (batch, d_out // np_):
                hint = "that is this rank's block of columns only: gather the other ranks' blocks (one allgather)"
            elif got.shape == (batch * np_, d_out // np_):
                hint = "the blocks were stacked as rows: join them along the columns, np.concatenate(parts, axis=1)"
            c.fail(
                key,
                f"{np_} ranks: rank {r} returned an output of shape {got.shape}, "
                f"expected x @ W + b of shape {truth.shape}"
                + (f" starting {fmt(truth.ravel())}" if got.shape == truth.shape else ""),
                hint,
            )
            raise Stop
        c.ok(key)
        if np_ == 2:
            calls = [v["calls"] for v in values]
            extra = next(((r, cs) for r, cs in enumerate(calls) if len(cs) != 1), None)
            c.judge(
                "one_gather",
                extra is None,
                f"rank {extra[0]} made {len(extra[1])} allgather call(s)" if extra else "",
                "a column-parallel layer communicates once in the forward pass: one allgather of "
                "its (batch, d_out/N) output",
            )


# ------------------------------------------------------------------ exercise 13
def bubble(stages: int, micro_batches: int) -> float:
    """The GPipe/1F1B bubble, (p-1)/(m+p-1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def idle_share(ops, step_time: float) -> float:
    """1 - (time spent in the operations) / (step time), for one stage."""
    return 1 - sum(end - start for _, _, start, end in ops) / step_time


@check(
    "ex13",
    "Predict, then measure, the pipeline bubble",
    {
        "formula": ("predicted_bubble(p, m) is (p-1)/(m+p-1)", 2),
        "simulated": ("idle_share on simulated schedules matches each stage's idle time", 1),
        "ranks": ("on 2 real ranks each stage measures its own idle share", 2),
    },
)
def ex13_pipeline_bubble(
    c, predicted_bubble, measured_idle_share, timeout: float = 180, hidden=None
):
    """Exercise 13: ``predicted_bubble(stages, micro_batches)`` and
    ``measured_idle_share(ops, step_time)`` on simulated and on measured 2-rank pipelines
    (``hidden``: the grader's own ``{"bubbles": [(p, m), ...], "schedules": [(p, m), ...]}``)."""
    from hvdcourse.course.lessons.model_parallel import pipeline

    hidden = hidden or {}
    require_function(c, predicted_bubble, "predicted_bubble")
    require_function(c, measured_idle_share, "measured_idle_share")
    cases = [(p, m) for p in (2, 4, 8) for m in (1, 2, 4, 16)]
    cases += [tuple(case) for case in hidden.get("bubbles", ())]
    wrong = []
    for p, m in cases:
        got = call(c, predicted_bubble, p, m, name="predicted_bubble")
        try:
            ok = np.isclose(float(got), bubble(p, m))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            wrong.append((p, m, got))
    if wrong:
        p, m, got = wrong[0]
        hint = "count the step in slots: m + p - 1 slots per pass, of which each stage works m"
        try:
            if np.isclose(float(got), (p - 1) / m):
                hint = "(p-1)/m is the idle time over the WORK; the bubble's share of the whole step is (p-1)/(m+p-1)"
            elif np.isclose(float(got), 1 - bubble(p, m)):
                hint = "that is the busy share; the bubble is the idle one, 1 minus it"
        except (TypeError, ValueError):
            pass
        c.fail(
            "formula",
            f"p={p}, m={m}: you predicted {got!r:.40}, the formula gives {bubble(p, m):.4f}",
            hint,
        )
    else:
        c.ok("formula")
    sim_wrong = None
    for kind in pipeline.SCHEDULES:
        for p, m in [(2, 1), (2, 4), (4, 4)] + [tuple(x) for x in hidden.get("schedules", ())]:
            run = pipeline.simulate(kind, p, m)
            for s, ops in enumerate(run["ops"]):
                ops = [tuple(op) for op in ops]
                got = call(
                    c, measured_idle_share, ops, run["step_time"], name="measured_idle_share"
                )
                want = idle_share(ops, run["step_time"])
                try:
                    ok = np.isclose(float(got), want)
                except (TypeError, ValueError):
                    ok = False
                if not ok and sim_wrong is None:
                    sim_wrong = (kind, p, m, s, got, want)
    if sim_wrong:
        kind, p, m, s, got, want = sim_wrong
        hint = "add up end - start over the stage's operations (its busy time) and compare with the step time"
        try:
            if np.isclose(float(got), 1 - want):
                hint = "that is the busy share; return the idle share, 1 - busy / step_time"
        except (TypeError, ValueError):
            pass
        c.fail(
            "simulated",
            f"{kind}, p={p}, m={m}, stage {s}: you measured {got!r:.40}, its operations "
            f"leave {want:.4f} of the step idle",
            hint,
        )
    else:
        c.ok("simulated")
    outcome = run_on_ranks(
        "pipeline_idle", measured_idle_share, np=2, timeout=timeout, micro_batches=4
    )
    if not outcome.all_ok:
        c.fail(
            "ranks",
            describe_failure(outcome),
            "the function gets this stage's list of (op, micro_batch, start, end) and the step time",
        )
        raise Stop
    for r, v in enumerate(outcome.values()):
        ops = [tuple(op) for op in v["ops"]]
        want = idle_share(ops, v["step_time"])
        if not np.isclose(v["answer"], want, atol=1e-9):
            stage = "the first stage" if r == 0 else "the last stage"
            c.fail(
                "ranks",
                f"rank {r} ({stage}, {len(ops)} operations in a {v['step_time'] * 1e3:.2f} ms "
                f"step): you said {v['answer']:.4f}, its operations leave {want:.4f} idle",
                "each rank measures only its own stage: its busy time is the sum of its own "
                "operations' durations",
            )
            return
    if sim_wrong:  # a constant can match one measured stage by chance: the formula comes first
        c.fail(
            "ranks",
            "the real ranks' shares count once the simulated schedules come out right too",
            "fix measured_idle_share on the simulated schedules first",
        )
        return
    c.ok("ranks")


# ------------------------------------------------------------------ exercise 14
def accumulation_steps(size: int, k: int, micro_batch: int, lr: float) -> dict:
    """Weights (kernel then bias) after the ways a learner's optimizer may step, computed in float64:
    ``large`` (one step of the k-times larger batch over all ranks: the goal), ``k_lr`` (the same with
    k times the rate: summed gradients), ``local`` (per rank, without the allreduce) and ``plain``
    (no accumulation: a step after every batch)."""
    parts = [drivers_scale.accumulation_inputs(r, k * micro_batch) for r in range(size)]
    kernel, bias = parts[0][2].astype(np.float64).ravel(), parts[0][3].astype(np.float64)
    start = np.concatenate([kernel, bias])

    def step(w, x, y, rate):
        err = x @ w[:-1] + w[-1] - y[:, 0]
        grad = np.concatenate([2 * x.T @ err / len(x), [2 * err.mean()]])
        return w - rate * grad

    xs = [p[0].astype(np.float64) for p in parts]
    ys = [p[1].astype(np.float64) for p in parts]
    x_all, y_all = np.concatenate(xs), np.concatenate(ys)
    plain = start
    for i in range(k):
        rows = slice(i * micro_batch, (i + 1) * micro_batch)
        plain = step(
            plain, np.concatenate([x[rows] for x in xs]), np.concatenate([y[rows] for y in ys]), lr
        )
    return {
        "start": start,
        "large": step(start, x_all, y_all, lr),
        "k_lr": step(start, x_all, y_all, k * lr),
        "local": [step(start, x, y, lr) for x, y in zip(xs, ys)],
        "plain": plain,
    }


@check(
    "ex14",
    "Make gradient accumulation exact",
    {
        "runs": ("trains on 2 ranks", 1),
        "same": ("both ranks end with the same weights", 1),
        "waits": ("the weights change only after the k-th batch", 1),
        "exact": (
            "after k batches the weights are those of one step of the k times larger batch",
            2,
        ),
    },
)
def ex14_accumulation(c, accumulating_optimizer, timeout: float = 300):
    """Exercise 14: ``accumulating_optimizer(hvd, lr, k)`` trained on 2 ranks, k = 4 batches of 4."""
    k, micro_batch, lr = 4, 4, 0.05
    require_function(c, accumulating_optimizer, "accumulating_optimizer")
    outcome = run_on_ranks(
        "accumulation",
        accumulating_optimizer,
        np=2,
        timeout=timeout,
        k=k,
        micro_batch=micro_batch,
        lr=lr,
    )
    if not c.judge(
        "runs",
        outcome.all_ok,
        describe_failure(outcome),
        "return hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=lr), ...); "
        "import tensorflow inside the function",
    ):
        raise Stop
    values = outcome.values()
    seen = [np.asarray(v["weights"], dtype=np.float64) for v in values]
    if any(s.shape != (k, 7) for s in seen):
        c.fail(
            "same",
            f"expected the weights after each of the {k} batches, got shapes {[s.shape for s in seen]}",
        )
        raise Stop
    want = accumulation_steps(2, k, micro_batch, lr)
    final = [s[-1] for s in seen]
    # weights that never move are the same on both ranks and "wait" forever: these two points
    # come only with a training that stepped
    stepped = not any(np.allclose(f, want["start"], atol=1e-7) for f in final)
    still = "the weights never changed: no step was taken (is the learning rate zero?)"
    if not stepped:
        c.fail("same", still, "return an optimizer with learning rate lr")
    else:
        c.judge(
            "same",
            np.allclose(final[0], final[1], atol=1e-6),
            f"rank 0 ended with {fmt(final[0])}, rank 1 with {fmt(final[1])}",
            "wrap the optimizer in hvd.DistributedOptimizer so the ranks average their gradients",
        )
    moved = [
        (r, i)
        for r, s in enumerate(seen)
        for i in range(k - 1)
        if not np.allclose(s[i], want["start"], atol=1e-7)
    ]
    if not stepped:
        c.fail("waits", still, "return an optimizer with learning rate lr")
    else:
        c.judge(
            "waits",
            not moved,
            f"rank {moved[0][0]}: the weights changed after batch {moved[0][1] + 1} of {k}"
            if moved
            else "",
            "pass backward_passes_per_step=k to hvd.DistributedOptimizer: it adds up k batches' "
            "gradients and applies them once",
        )
    rank_off = [r for r in range(2) if not np.allclose(final[r], want["large"], atol=1e-5)]
    if not rank_off:
        c.ok("exact")
        return
    r = rank_off[0]
    hint = "the step must use the mean gradient over the k batches of both ranks"
    if np.allclose(final[r], want["k_lr"], atol=1e-5):
        hint = (
            "the k batches' gradients were SUMMED: that is the large batch with k times the learning "
            "rate; set average_aggregated_gradients=True (or divide the learning rate by k)"
        )
    elif np.allclose(final[r], want["local"][r], atol=1e-5):
        hint = "rank {r} used its own gradients only: wrap the optimizer in hvd.DistributedOptimizer".format(
            r=r
        )
    elif np.allclose(final[r], want["plain"], atol=1e-5):
        hint = "a step after every batch is plain data parallelism: accumulate with backward_passes_per_step=k"
    c.fail(
        "exact",
        f"rank {r} ended with {fmt(final[r])}; one step of the large batch gives "
        f"{fmt(want['large'])}",
        hint,
    )
