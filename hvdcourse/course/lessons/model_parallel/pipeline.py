"""Pipeline parallelism: stages on ranks, micro-batches, GPipe and 1F1B (lesson: Model parallelism by hand).

A stack of dense ``tanh`` layers is cut into ``p`` stages of consecutive layers, stage ``s`` on rank
``s``. A batch is cut into ``m`` micro-batches; stage ``s`` receives each micro-batch's activations
from stage ``s-1``, runs its layers, and sends the result to stage ``s+1``; the backward pass sends
gradients the other way. Gradients of the micro-batches add up, so one step equals one step on
the whole batch.

Two schedules (the order in which a stage runs its forward ``F`` and backward ``B`` operations):

* **GPipe** (Huang et al. 2019, arXiv:1811.06965): all ``m`` forwards, then all ``m`` backwards;
  a stage keeps the activations of all ``m`` micro-batches until their backward;
* **1F1B** (PipeDream-Flush, Narayanan et al. 2021, arXiv:2104.04473): ``p - s - 1`` forwards to
  fill the pipeline, then one forward and one backward in turn, then the remaining backwards; a
  stage keeps at most ``p - s`` micro-batches' activations.

With the same time ``t_f`` for every forward and ``t_b`` for every backward, both take
``(m + p - 1)(t_f + t_b)`` per step, of which each stage works ``m (t_f + t_b)``: the idle share,
the **bubble**, is ``(p - 1) / (m + p - 1)`` (:func:`bubble_fraction`). :func:`simulate` follows the
schedules with fixed times; :func:`run_pipeline` runs them with mpi4py and measures.
"""

from __future__ import annotations

import math
import time

import numpy as np

from hvdcourse.runtime.errors import UsageError

SCHEDULES = ("gpipe", "1f1b")


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """The idle share of a pipeline step, ``(p - 1) / (m + p - 1)`` (GPipe and 1F1B alike)."""
    _check_sizes(stages, micro_batches)
    return (stages - 1) / (micro_batches + stages - 1)


def _check_sizes(stages: int, micro_batches: int) -> None:
    if stages < 1:
        raise UsageError(f"a pipeline needs at least one stage, got {stages}")
    if micro_batches < 1:
        raise UsageError(f"a step needs at least one micro-batch, got {micro_batches}")


def schedule(kind: str, stages: int, micro_batches: int) -> list:
    """The operations of every stage, in order: ``ops[s]`` is a list of ``("F", i)`` / ``("B", i)``."""
    _check_sizes(stages, micro_batches)
    m = micro_batches
    if kind == "gpipe":
        return [[("F", i) for i in range(m)] + [("B", i) for i in range(m)] for _ in range(stages)]
    if kind == "1f1b":
        ops = []
        for s in range(stages):
            warmup = min(stages - s - 1, m)
            order = [("F", i) for i in range(warmup)]
            for i in range(m - warmup):
                order += [("F", warmup + i), ("B", i)]
            order += [("B", i) for i in range(m - warmup, m)]
            ops.append(order)
        return ops
    raise UsageError(f"unknown schedule {kind!r}; choose one of {', '.join(SCHEDULES)}")


def simulate(
    kind: str,
    stages: int,
    micro_batches: int,
    t_forward: float = 1.0,
    t_backward: float = 2.0,
    durations: dict | None = None,
) -> dict:
    """Run a schedule with fixed operation times and no communication cost.

    ``durations`` (``{(stage, op, i): seconds}``), when given, replaces the fixed times: a measured
    step replayed with each operation's own compute time (see :func:`measure_bubble`).

    An operation starts when its stage is free and its input is there: ``F`` of micro-batch ``i``
    on stage ``s`` needs ``F`` of ``i`` on ``s - 1``; ``B`` of ``i`` on ``s`` needs ``B`` of ``i`` on
    ``s + 1`` (the last stage's ``B`` needs its own ``F``). Returns ``{"ops": [[(op, i, start, end),
    ...] per stage], "step_time", "idle_fraction"}`` (idle share over all stages).
    """
    plan = schedule(kind, stages, micro_batches)
    done, free, ops = {}, [0.0] * stages, [[] for _ in range(stages)]
    position = [0] * stages
    while any(position[s] < len(plan[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if position[s] == len(plan[s]):
                continue
            op, i = plan[s][position[s]]
            need = (
                (s - 1, "F", i)
                if op == "F" and s > 0
                else (s + 1, "B", i)
                if op == "B" and s < stages - 1
                else None
            )
            if need is not None and need not in done:
                continue
            start = max(free[s], done[need] if need else 0.0)
            if durations is not None:
                end = start + durations[(s, op, i)]
            else:
                end = start + (t_forward if op == "F" else t_backward)
            done[(s, op, i)] = free[s] = end
            ops[s].append((op, i, start, end))
            position[s] += 1
            progressed = True
        if not progressed:  # cannot happen with the two schedules above; guards a wrong one
            raise RuntimeError(f"schedule {kind!r} deadlocks")
    step = max(free)
    busy = sum(end - start for stage in ops for _, _, start, end in stage)
    return {"ops": ops, "step_time": step, "idle_fraction": 1 - busy / (stages * step)}


# ----------------------------------------------------------------------- the model, one process


def init_layers(width: int, layers: int, seed: int = 0, dtype=np.float64) -> list:
    """``layers`` dense layers ``(W, b)`` of ``width`` inputs and outputs, the same for the same seed."""
    rng = np.random.default_rng(seed)
    return [
        (
            (rng.standard_normal((width, width)) / math.sqrt(width)).astype(dtype),
            (0.1 * rng.standard_normal(width)).astype(dtype),
        )
        for _ in range(layers)
    ]


def split_stages(layers: list, stages: int) -> list:
    """Cut the stack into ``stages`` stages of as many consecutive layers each."""
    if stages < 1 or len(layers) % stages:
        raise UsageError(
            f"{len(layers)} layers cannot be cut into {stages} stages of equal length: "
            f"use a number of layers that is a multiple of {stages}"
        )
    per = len(layers) // stages
    return [layers[s * per : (s + 1) * per] for s in range(stages)]


def stage_forward(layers: list, x: np.ndarray):
    """Output of the stage and the inputs of its layers (kept for the backward pass)."""
    inputs = []
    for w, b in layers:
        inputs.append(x)
        x = np.tanh(x @ w + b)
    inputs.append(x)  # the output too: tanh' = 1 - tanh^2 needs it
    return x, inputs


def stage_backward(layers: list, inputs: list, dout: np.ndarray):
    """Gradient of the stage's input and of its layers ``[(dW, db), ...]``."""
    grads = [None] * len(layers)
    for k in range(len(layers) - 1, -1, -1):
        w, _ = layers[k]
        dz = dout * (1 - inputs[k + 1] ** 2)
        grads[k] = (inputs[k].T @ dz, dz.sum(axis=0))
        dout = dz @ w.T
    return dout, grads


def loss_and_grad(out: np.ndarray, target: np.ndarray, batch: int):
    """Half the squared error summed over outputs, averaged over the ``batch`` samples of the step.

    Dividing by the whole step's batch (not the micro-batch's) makes the micro-batches' gradients
    add up to the whole batch's.
    """
    diff = out - target
    return 0.5 * float((diff**2).sum()) / batch, diff / batch


def reference_step(layers: list, x: np.ndarray, target: np.ndarray):
    """Loss and gradients of all layers for the whole batch, on one process, no pipeline."""
    out, inputs = stage_forward(layers, x)
    loss, dout = loss_and_grad(out, target, len(x))
    _, grads = stage_backward(layers, inputs, dout)
    return loss, grads


# ----------------------------------------------------------------------- N ranks


def run_pipeline(
    comm,
    kind: str,
    layers: list,
    x: np.ndarray | None,
    target: np.ndarray | None,
    micro_batches: int,
    batch: int,
    width: int,
) -> dict:
    """One training step of this rank's stage (``layers``) on the ``kind`` schedule.

    Rank 0 passes the batch ``x``, the last rank the ``target`` (others pass ``None``); ``batch``
    and ``width`` give the shapes. Sends are non-blocking (``Isend``), so that two stages that send
    to each other at the same moment (1F1B) never wait on each other; receives block. Returns this
    stage's ``grads`` (summed over the micro-batches), ``loss`` (last stage; ``None`` elsewhere),
    ``busy`` and ``step_time`` (seconds, measured with ``MPI.Wtime`` between two barriers),
    ``idle_fraction`` (``1 - busy / step_time``), ``ops`` ``[(op, i, start, end)]`` relative to the
    step's start, ``cpu`` ``{(op, i): seconds}``: each operation's compute time as this thread's CPU
    time (what it cost, whatever else the machine ran meanwhile), and ``held_max``: the most
    micro-batches whose activations it held at once.
    """
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    plan = schedule(kind, size, micro_batches)[rank]
    if batch % micro_batches:
        raise UsageError(
            f"a batch of {batch} cannot be cut into {micro_batches} equal micro-batches; "
            f"use a number of micro-batches that divides {batch}"
        )
    rows = batch // micro_batches
    first, last = rank == 0, rank == size - 1
    grads = [(np.zeros_like(w), np.zeros_like(b)) for w, b in layers]
    held, held_max, dloss, loss, sends, ops, busy, cpu = {}, 0, {}, 0.0, [], [], 0.0, {}
    comm.Barrier()
    t0 = MPI.Wtime()
    for op, i in plan:
        if op == "F":
            if first:
                inp = np.ascontiguousarray(x[i * rows : (i + 1) * rows])
            else:
                inp = np.empty((rows, width), dtype=layers[0][0].dtype)
                comm.Recv(inp, source=rank - 1, tag=i)
            start, cpu_start = MPI.Wtime(), time.thread_time()
            out, held[i] = stage_forward(layers, inp)
            if last:
                part, dloss[i] = loss_and_grad(out, target[i * rows : (i + 1) * rows], batch)
                loss += part
            end, cpu[(op, i)] = MPI.Wtime(), time.thread_time() - cpu_start
            if not last:
                sends.append((comm.Isend(out, dest=rank + 1, tag=i), out))
            held_max = max(held_max, len(held))
        else:
            if last:
                dout = dloss.pop(i)
            else:
                dout = np.empty((rows, width), dtype=layers[0][0].dtype)
                comm.Recv(dout, source=rank + 1, tag=micro_batches + i)
            start, cpu_start = MPI.Wtime(), time.thread_time()
            din, part = stage_backward(layers, held.pop(i), dout)
            for (gw, gb), (dw, db) in zip(grads, part):
                gw += dw
                gb += db
            end, cpu[(op, i)] = MPI.Wtime(), time.thread_time() - cpu_start
            if not first:
                sends.append((comm.Isend(din, dest=rank - 1, tag=micro_batches + i), din))
        busy += end - start
        ops.append((op, i, start - t0, end - t0))
    MPI.Request.Waitall([request for request, _ in sends])
    comm.Barrier()
    step = MPI.Wtime() - t0
    return {
        "grads": grads,
        "loss": loss if last else None,
        "busy": busy,
        "step_time": step,
        "idle_fraction": 1 - busy / step,
        "ops": ops,
        "cpu": cpu,
        "held_max": held_max,
    }


def measure_bubble(
    comm,
    micro_batches: list,
    kind: str = "gpipe",
    width: int = 256,
    layers_per_stage: int = 4,
    batch: int = 256,
    repeats: int = 3,
    seed: int = 0,
) -> list:
    """Measured idle share of every stage for each number of micro-batches, and the formula's.

    Every rank builds the same model and batch from ``seed``; each ``m`` runs ``repeats`` steps and
    keeps the step with the median step time. Returns, on every rank, one dict per ``m``:
    ``micro_batches``, ``formula``, ``measured`` (mean idle share over the stages),
    ``per_stage`` (each stage's), ``step_time`` (s), ``busy`` (s, each stage's) and ``replayed``:
    the idle share of the same step replayed (:func:`simulate`) with each operation's measured CPU
    time. ``measured`` also counts the time a stage was descheduled by other work on the machine;
    ``replayed`` is the bubble that the compute itself leaves, whatever the machine's load.
    """
    size = comm.Get_size()
    stages = split_stages(init_layers(width, layers_per_stage * size, seed), size)
    rng = np.random.default_rng(seed + 1)
    x, target = rng.standard_normal((batch, width)), rng.standard_normal((batch, width))
    rank = comm.Get_rank()
    rows = []
    for m in micro_batches:
        runs = [
            run_pipeline(
                comm,
                kind,
                stages[rank],
                x if rank == 0 else None,
                target if rank == size - 1 else None,
                m,
                batch,
                width,
            )
            for _ in range(repeats)
        ]
        times = [r["step_time"] for r in runs]
        chosen = runs[int(np.argsort(times)[len(times) // 2])]
        idle = comm.allgather(chosen["idle_fraction"])
        busy = comm.allgather(chosen["busy"])
        cpu = comm.allgather(chosen["cpu"])
        durations = {(s, op, i): t for s, ops in enumerate(cpu) for (op, i), t in ops.items()}
        rows.append(
            {
                "micro_batches": m,
                "formula": bubble_fraction(size, m),
                "measured": float(np.mean(idle)),
                "per_stage": [float(v) for v in idle],
                "step_time": float(chosen["step_time"]),
                "busy": [float(v) for v in busy],
                "replayed": simulate(kind, size, m, durations=durations)["idle_fraction"],
            }
        )
    return rows


def compare_with_reference(
    comm,
    kind: str,
    micro_batches: int,
    width: int = 8,
    layers_per_stage: int = 2,
    batch: int = 8,
    seed: int = 0,
) -> dict:
    """One pipelined step and the whole-batch step on one process; return what to compare.

    Every rank builds the same model and data from ``seed`` and computes the reference itself.
    Returns ``max_abs_diff_grads`` (this stage's gradients against the reference's layers of this
    stage), ``loss`` and ``reference_loss`` (the last rank's; ``None`` elsewhere) and ``held_max``.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    all_layers = init_layers(width, layers_per_stage * size, seed)
    stages = split_stages(all_layers, size)
    rng = np.random.default_rng(seed + 1)
    x, target = rng.standard_normal((batch, width)), rng.standard_normal((batch, width))
    ref_loss, ref_grads = reference_step(all_layers, x, target)
    result = run_pipeline(comm, kind, stages[rank], x, target, micro_batches, batch, width)
    mine = ref_grads[rank * layers_per_stage : (rank + 1) * layers_per_stage]
    diff = max(
        max(float(np.abs(gw - rw).max()), float(np.abs(gb - rb).max()))
        for (gw, gb), (rw, rb) in zip(result["grads"], mine)
    )
    return {
        "rank": rank,
        "size": size,
        "schedule": kind,
        "micro_batches": micro_batches,
        "max_abs_diff_grads": diff,
        "loss": result["loss"],
        "reference_loss": ref_loss if rank == size - 1 else None,
        "held_max": result["held_max"],
    }
