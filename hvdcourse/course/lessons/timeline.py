"""Record and read Horovod timelines (lesson: Profiling with the Horovod timeline).

A Horovod timeline is a Chrome-trace JSON array written by rank 0 only. Each tensor is drawn as a
"process" (``{"name": "process_name", "ph": "M", "pid": N, "args": {"name": "<tensor>"}}``) and its
life is a sequence of begin/end (``B``/``E``) pairs: ``NEGOTIATE_ALLREDUCE`` (waiting until every rank
has the tensor ready), then ``ALLREDUCE`` with nested activities such as ``MEMCPY_IN_FUSION_BUFFER``,
``MPI_ALLREDUCE`` or ``GLOO_ALLREDUCE`` and ``MEMCPY_OUT_FUSION_BUFFER``. ``E`` events carry no name:
they close the latest open event of the same ``pid``. A run that is killed leaves a file without the
closing ``]``, possibly with a half-written last record and events that were never closed; the reader
accepts all of that.

Reading: :func:`load_events` (spans), :func:`phase_table` (time per phase), :func:`fused_ops`
(collective operations, i.e. fusion buffers), :func:`gantt` (a Gantt chart).
Recording: :func:`record` runs a Horovod trainer (Keras, or PyTorch with ``trainer="train_torch_hvd"``)
on N ranks with ``HOROVOD_TIMELINE=<file>``, or with ``HOROVOD_TIMELINE=DYNAMIC`` and
:func:`dynamic_timeline_callback` (:func:`torch_dynamic_timeline`) around a few steps.

Command line::

    python -m hvdcourse.course.lessons.timeline record --out tl.json [--trainer train_torch_hvd]
                    [--dynamic 5 10] [--fusion-threshold B] [--cycle-time MS] -- --epochs 1 --max-steps 20
    python -m hvdcourse.course.lessons.timeline show tl.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field

from hvdcourse.runtime.errors import CourseError, RunFailed, run_cli

# Bytes per element of the data types written with a tensor's last E event ("float32"; older
# versions wrote "HOROVOD_FLOAT32").
DTYPE_BYTES = {
    "uint8": 1,
    "int8": 1,
    "uint16": 2,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "bool": 1,
}


class TimelineError(CourseError, RuntimeError):
    """A timeline file cannot be used; the message says what to do (exit code 2)."""


@dataclass
class Span:
    """One phase of one tensor: ``start_us`` and ``dur_us`` in microseconds since the timeline began.

    ``depth`` is 0 for top-level phases (NEGOTIATE_ALLREDUCE, ALLREDUCE) and 1 for the activities
    nested in them. ``closed`` is False for an event the file never ended (see :func:`load_events`).
    ``args`` merges the arguments of the begin and end events (e.g. ``dtype`` and ``shape``).
    """

    tensor: str
    phase: str
    start_us: float
    dur_us: float
    depth: int
    closed: bool = True
    args: dict = field(default_factory=dict)

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


# ----------------------------------------------------------------------------------------- reading


def read_trace(path: str) -> list:
    """The event records of a timeline file, in file order, tolerating a truncated end.

    Records are decoded one by one, so a missing ``]`` or a half-written last record only loses
    that last record.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError as err:
        raise TimelineError(
            f"cannot read timeline {path!r} ({err.strerror}). Only rank 0 writes it: "
            "check HOROVOD_TIMELINE on rank 0 and that the run got that far."
        ) from None
    start = text.find("[")
    if start < 0:
        raise TimelineError(
            f"{path!r} is empty or not a Horovod timeline (no '['). The run may have "
            "ended before Horovod wrote anything: record more steps."
        )
    decoder, events, i, n = json.JSONDecoder(), [], start + 1, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        try:
            record, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            break  # the writer stopped in the middle of this record
        if isinstance(record, dict):
            events.append(record)
    return events


def tensor_names(events: list) -> dict:
    """pid -> tensor name, from the ``process_name`` metadata records."""
    names = {}
    for ev in events:
        if (
            ev.get("ph") == "M"
            and ev.get("name") == "process_name"
            and "name" in ev.get("args", {})
        ):
            names[ev.get("pid")] = ev["args"]["name"]
    return names


def spans_from_events(events: list, keep_unclosed: bool = False) -> list:
    """Pair B/E events per pid with a stack; return :class:`Span` objects sorted by start time.

    An E closes the latest open B of its pid (E events have no name). Events still open at the end
    of the file are dropped, or with ``keep_unclosed=True`` ended at the file's last timestamp and
    marked ``closed=False``.
    """
    names = tensor_names(events)
    stacks = defaultdict(list)
    spans = []
    last_ts = 0.0
    for ev in events:
        ph = ev.get("ph")
        if ph not in ("B", "E") or "ts" not in ev:
            continue
        pid, ts = ev.get("pid"), float(ev["ts"])
        last_ts = max(last_ts, ts)
        stack = stacks[pid]
        if ph == "B":
            stack.append((ev.get("name", "?"), ts, len(stack), dict(ev.get("args", {}))))
        elif stack:  # an E without an open B (file started mid-way) is ignored
            phase, begin, depth, args = stack.pop()
            args.update(ev.get("args", {}))
            spans.append(
                Span(names.get(pid, f"pid {pid}"), phase, begin, ts - begin, depth, True, args)
            )
    if keep_unclosed:
        for pid, stack in stacks.items():
            for phase, begin, depth, args in stack:
                spans.append(
                    Span(
                        names.get(pid, f"pid {pid}"),
                        phase,
                        begin,
                        last_ts - begin,
                        depth,
                        False,
                        args,
                    )
                )
    spans.sort(key=lambda s: (s.start_us, s.depth))
    return spans


def load_events(path: str, keep_unclosed: bool = False) -> list:
    """Spans (tensor, phase, start_us, dur_us, depth, ...) of the timeline file ``path``."""
    return spans_from_events(read_trace(path), keep_unclosed=keep_unclosed)


def rank_ready(events: list):
    """The negotiation ticks as a DataFrame (tensor, rank, ts_us): when each rank reported a tensor ready.

    Horovod writes one zero-length ``X`` event, named after the rank, inside ``NEGOTIATE_*`` each
    time a rank reports the tensor ready; the last rank to report is the one the others wait for.
    """
    import pandas as pd

    names = tensor_names(events)
    rows = [
        {
            "tensor": names.get(ev.get("pid"), f"pid {ev.get('pid')}"),
            "rank": int(ev["name"]),
            "ts_us": float(ev["ts"]),
        }
        for ev in events
        if ev.get("ph") == "X" and str(ev.get("name", "")).isdigit() and "ts" in ev
    ]
    return pd.DataFrame(rows, columns=["tensor", "rank", "ts_us"])


def cycle_marks(events: list) -> list:
    """Timestamps (us) of the ``CYCLE_START`` markers (written with mark_cycles / HOROVOD_TIMELINE_MARK_CYCLES)."""
    return [
        float(ev["ts"]) for ev in events if ev.get("ph") == "i" and ev.get("name") == "CYCLE_START"
    ]


# What each name in a timeline means (Horovod's docs/timeline.rst and the activity names of
# horovod/common/common.h, 0.28.1), and on which hardware Horovod writes it.
PHASES = {
    "NEGOTIATE_ALLREDUCE": (
        "all",
        "from the first rank announcing the tensor until every rank has it ready: "
        "waiting for the slowest rank (ticks named after the ranks show who reported when)",
    ),
    "NEGOTIATE_BROADCAST": ("all", "the same for a broadcast"),
    "NEGOTIATE_ALLGATHER": ("all", "the same for an allgather"),
    "ALLREDUCE": (
        "all",
        "the operation itself, from start to result; the activities below nest inside it",
    ),
    "BROADCAST": ("all", "a broadcast, from start to result"),
    "ALLGATHER": ("all", "an allgather, from start to result"),
    "WAIT_FOR_DATA": (
        "GPU",
        "waiting for the GPU to finish computing this tensor (its ready event); "
        "only for tensors on a GPU",
    ),
    "WAIT_FOR_OTHER_TENSOR_DATA": (
        "GPU",
        "this tensor is ready, the others of the same fusion buffer are not yet",
    ),
    "QUEUE": ("GPU (NCCL)", "waiting for the previous NCCL operation to finish"),
    "INIT_FUSION_BUFFER": (
        "all",
        "allocating the fusion buffer, the first time tensors are fused "
        "(recorded on each tensor of that operation)",
    ),
    "MEMCPY_IN_FUSION_BUFFER": (
        "all",
        "copying the fused tensors into the one buffer that is reduced",
    ),
    "MEMCPY_OUT_FUSION_BUFFER": ("all", "copying the results out of the fusion buffer"),
    "GLOO_ALLREDUCE": ("CPU", "the transfer and reduction by Gloo"),
    "MPI_ALLREDUCE": ("CPU", "the transfer and reduction by MPI"),
    "NCCL_ALLREDUCE": ("GPU (NCCL)", "the transfer and reduction by NCCL (RCCL on AMD GPUs)"),
    "GLOO_BCAST": ("CPU", "the broadcast by Gloo"),
    "MPI_BCAST": ("CPU", "the broadcast by MPI"),
    "CYCLE_START": (
        "all",
        "an instant marker at the start of each cycle of Horovod's background thread; "
        "only with HOROVOD_TIMELINE_MARK_CYCLES=1 (or hvd.start_timeline(..., mark_cycles=True))",
    ),
}


def phase_names(events: list) -> dict:
    """{name: count} of the phases (``B`` events) and instant markers (``i`` events) in ``events``."""
    counts: dict = defaultdict(int)
    for ev in events:
        if ev.get("ph") in ("B", "i") and "name" in ev:
            counts[ev["name"]] += 1
    return dict(counts)


def phase_catalogue(*event_lists):
    """A DataFrame: every documented phase (:data:`PHASES`) and every other name found in the
    ``event_lists``, with where Horovod writes it, what it means and how often these recordings hold it."""
    import pandas as pd

    seen: dict = defaultdict(int)
    for events in event_lists:
        for name, count in phase_names(events).items():
            seen[name] += count
    names = list(PHASES) + sorted(n for n in seen if n not in PHASES)
    return pd.DataFrame(
        [
            {
                "phase": n,
                "written on": PHASES.get(n, ("?", ""))[0],
                "meaning": PHASES.get(n, ("", "not in Horovod's documentation"))[1],
                "in these recordings": seen.get(n, 0),
            }
            for n in names
        ]
    ).set_index("phase")


# --------------------------------------------------------------------------------------- analysis


def _union_length(intervals) -> float:
    """Total length covered by the (start, end) intervals (overlaps counted once)."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def phase_table(spans: list):
    """Time per phase as a pandas DataFrame indexed by phase, top-level phases first.

    Columns: ``depth``; ``count`` (spans); ``total_ms`` (summed over tensors: 10 fused tensors in one
    1 ms allreduce count 10 ms); ``mean_ms``; ``share`` (total_ms over the total of the top-level
    phases, so nested phases read as a part of their parent); ``wall_ms`` (time during which at
    least one tensor was in the phase, overlaps counted once).
    """
    import pandas as pd

    columns = ["depth", "count", "total_ms", "mean_ms", "share", "wall_ms"]
    if not spans:
        return pd.DataFrame(columns=columns).rename_axis("phase")
    by_phase = defaultdict(list)
    for s in spans:
        by_phase[s.phase].append(s)
    rows = {}
    for phase, group in by_phase.items():
        total = sum(s.dur_us for s in group) / 1000
        rows[phase] = {
            "depth": min(s.depth for s in group),
            "count": len(group),
            "total_ms": total,
            "mean_ms": total / len(group),
            "wall_ms": _union_length((s.start_us, s.end_us) for s in group) / 1000,
        }
    table = pd.DataFrame.from_dict(rows, orient="index")
    top = table.loc[table["depth"] == 0, "total_ms"].sum()
    table["share"] = table["total_ms"] / top if top > 0 else float("nan")
    table = table.sort_values(["depth", "total_ms"], ascending=[True, False])
    return table[columns].rename_axis("phase")


def tensor_bytes(span: Span) -> int | None:
    """Size in bytes of a span's tensor from its ``dtype``/``shape`` arguments, None if unknown."""
    dtype, shape = (
        str(span.args.get("dtype", "")).lower().replace("horovod_", ""),
        span.args.get("shape"),
    )
    if dtype not in DTYPE_BYTES or shape is None:
        return None
    dims = [int(d) for d in str(shape).strip("[]() ").replace(" ", "").split(",") if d]
    count = 1
    for d in dims:
        count *= d
    return count * DTYPE_BYTES[dtype]


def fused_ops(spans: list, phase: str = "ALLREDUCE"):
    """The collective operations behind the ``phase`` spans, as a DataFrame (one row per operation).

    Horovod's background thread runs one response at a time and opens ``phase`` for every tensor of
    a response before the collective, closing them all after it; so spans that overlap belong to
    one fused operation. Columns: ``start_ms``, ``dur_ms``, ``tensors``, ``bytes`` (None if unknown).
    """
    import pandas as pd

    ops = []
    for s in sorted(
        (s for s in spans if s.phase == phase and s.depth == 0), key=lambda s: s.start_us
    ):
        if ops and s.start_us < ops[-1]["end"]:
            op = ops[-1]
            op["end"] = max(op["end"], s.end_us)
        else:
            op = {"start": s.start_us, "end": s.end_us, "tensors": 0, "bytes": 0}
            ops.append(op)
        op["tensors"] += 1
        size = tensor_bytes(s)
        op["bytes"] = None if (size is None or op["bytes"] is None) else op["bytes"] + size
    return pd.DataFrame(
        [
            {
                "start_ms": o["start"] / 1000,
                "dur_ms": (o["end"] - o["start"]) / 1000,
                "tensors": o["tensors"],
                "bytes": o["bytes"],
            }
            for o in ops
        ],
        columns=["start_ms", "dur_ms", "tensors", "bytes"],
    )


def summary(spans: list, events: list | None = None) -> dict:
    """A few numbers that change with the fusion threshold and the cycle time."""
    ops = fused_ops(spans)
    table = phase_table(spans)

    def total(phase):
        return float(table.loc[phase, "total_ms"]) if phase in table.index else 0.0

    result = {
        "tensors": len({s.tensor for s in spans}),
        "allreduce_spans": int(
            (table.loc["ALLREDUCE", "count"]) if "ALLREDUCE" in table.index else 0
        ),
        "allreduce_ops": len(ops),
        "tensors_per_op": float(ops["tensors"].mean()) if len(ops) else 0.0,
        "negotiate_ms": total("NEGOTIATE_ALLREDUCE"),
        "allreduce_ms": total("ALLREDUCE"),
        "allreduce_wall_ms": float(ops["dur_ms"].sum()) if len(ops) else 0.0,
    }
    if events is not None:
        result["cycles"] = len(cycle_marks(events))
    return result


# ------------------------------------------------------------------------------------------ drawing

# One colour per phase, the same in every chart; phases not listed get the next free colour.
PHASE_COLOURS = {
    "NEGOTIATE_ALLREDUCE": "#4C72B0",
    "NEGOTIATE_BROADCAST": "#64B5CD",
    "ALLREDUCE": "#DD8452",
    "BROADCAST": "#937860",
    "INIT_FUSION_BUFFER": "#8C8C8C",
    "MEMCPY_IN_FUSION_BUFFER": "#55A868",
    "GLOO_ALLREDUCE": "#C44E52",
    "MPI_ALLREDUCE": "#C44E52",
    "NCCL_ALLREDUCE": "#C44E52",
    "GLOO_BCAST": "#DA8BC3",
    "MPI_BCAST": "#DA8BC3",
    "MEMCPY_OUT_FUSION_BUFFER": "#8172B3",
}
_PALETTE = ["#CCB974", "#2F4B7C", "#A05195", "#F95D6A", "#665191", "#FFA600"]


def short_name(tensor: str, width: int = 38) -> str:
    """A tensor name shortened for an axis label (its tail, which tells the layers apart)."""
    return tensor if len(tensor) <= width else "..." + tensor[-(width - 3) :]


def gantt(spans: list, ax=None, max_tensors: int = 30, window_ms: tuple | None = None):
    """Draw a Gantt chart of ``spans``: one row per tensor, one colour per phase; return the axes.

    Nested phases are drawn as thinner bars inside their parent. ``window_ms=(t0, t1)`` restricts
    the chart to that time range (ms since the timeline began); only the first ``max_tensors``
    tensors (by first appearance) get a row.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.28 * min(max_tensors, 30) + 1.5))
    if window_ms is not None:
        t0, t1 = (w * 1000 for w in window_ms)
        spans = [s for s in spans if s.end_us >= t0 and s.start_us <= t1]
    rows = {}
    for s in spans:
        if s.tensor not in rows and len(rows) < max_tensors:
            rows[s.tensor] = len(rows)
    phases = list(
        dict.fromkeys(s.phase for s in sorted(spans, key=lambda s: (s.depth, s.start_us)))
    )
    others = [p for p in phases if p not in PHASE_COLOURS]
    colours = {**PHASE_COLOURS, **{p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(others)}}
    bars = defaultdict(list)
    for s in spans:
        if s.tensor in rows:
            bars[(s.tensor, s.phase, s.depth)].append(
                (s.start_us / 1000, max(s.dur_us / 1000, 1e-3))
            )
    for (tensor, phase, depth), ranges in bars.items():
        height = 0.8 if depth == 0 else 0.4
        ax.broken_barh(ranges, (rows[tensor] - height / 2, height), facecolors=colours[phase])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([short_name(t) for t in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("time since the timeline started (ms)")
    if window_ms is not None:
        ax.set_xlim(*window_ms)
    ax.legend(
        handles=[Patch(color=colours[p], label=p) for p in phases],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    return ax


# ---------------------------------------------------------------------------------------- recording


def dynamic_timeline_callback(
    path: str, start_step: int, stop_step: int, mark_cycles: bool = False
):
    """A Keras callback that records training steps ``start_step`` to ``stop_step`` (counted from 0).

    Needs ``HOROVOD_TIMELINE=DYNAMIC`` in the environment before ``hvd.init()``; all ranks call
    ``start_timeline``/``stop_timeline``, rank 0 writes the file.
    """
    import horovod.tensorflow as hvd_tf
    import tensorflow as tf

    if os.environ.get("HOROVOD_TIMELINE") != "DYNAMIC":
        raise TimelineError(
            "hvd.start_timeline() needs HOROVOD_TIMELINE=DYNAMIC set before hvd.init(); "
            "export it in the job (or use hvdcourse.course.lessons.timeline.record(..., dynamic=...))."
        )
    if not 0 <= start_step < stop_step:
        raise ValueError(f"need 0 <= start_step < stop_step, got {start_step}, {stop_step}")

    class DynamicTimeline(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.step, self.recording = 0, False

        def on_train_batch_begin(self, batch, logs=None):
            if self.step == start_step:
                hvd_tf.start_timeline(os.path.abspath(path), mark_cycles=mark_cycles)
                self.recording = True

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1
            if self.recording and self.step >= stop_step:
                self._stop()

        def on_train_end(self, logs=None):
            if self.recording:
                self._stop()

        def _stop(self):
            hvd_tf.stop_timeline()
            self.recording = False

    return DynamicTimeline()


def torch_dynamic_timeline(path: str, start_step: int, stop_step: int, mark_cycles: bool = False):
    """The PyTorch trainers' hook doing what :func:`dynamic_timeline_callback` does for Keras.

    ``train_torch_hvd.main(argv, callbacks=[...])`` calls ``on_train_batch_begin``/``_end(step,
    model, optimizer)`` with the global step; the same ``HOROVOD_TIMELINE=DYNAMIC`` rule applies.
    A run that ends before ``stop_step`` leaves the file to Horovod's shutdown.
    """
    import horovod.torch as hvd_torch

    if os.environ.get("HOROVOD_TIMELINE") != "DYNAMIC":
        raise TimelineError(
            "hvd.start_timeline() needs HOROVOD_TIMELINE=DYNAMIC set before hvd.init(); "
            "export it in the job (or use hvdcourse.course.lessons.timeline.record(..., dynamic=...))."
        )
    if not 0 <= start_step < stop_step:
        raise ValueError(f"need 0 <= start_step < stop_step, got {start_step}, {stop_step}")

    class TorchDynamicTimeline:
        recording = False

        def on_train_batch_begin(self, step, model, optimizer):
            if step == start_step:
                hvd_torch.start_timeline(os.path.abspath(path), mark_cycles=mark_cycles)
                self.recording = True

        def on_train_batch_end(self, step, model, optimizer):
            if self.recording and step + 1 >= stop_step:
                hvd_torch.stop_timeline()
                self.recording = False

    return TorchDynamicTimeline()


# The Horovod trainers record() can run: Keras (the default) and PyTorch
TRAINERS = ("train_hvd", "train_torch_hvd")


@dataclass
class Recording:
    """Outcome of :func:`record`: the timeline path and the :class:`hvdcourse.runtime.launch.RankRun`."""

    path: str
    run: object

    @property
    def ok(self) -> bool:
        return self.run.ok and os.path.isfile(self.path)


def knob_env(
    fusion_threshold: int | None = None, cycle_time: float | None = None, mark_cycles: bool = False
) -> dict:
    """Environment variables for Horovod's fusion threshold (bytes) and cycle time (ms)."""
    env = {}
    if fusion_threshold is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(int(fusion_threshold))
    if cycle_time is not None:
        env["HOROVOD_CYCLE_TIME"] = str(cycle_time)
    if mark_cycles:
        env["HOROVOD_TIMELINE_MARK_CYCLES"] = "1"
    return env


def record(
    path: str,
    train_args=(),
    np: int = 2,
    dynamic: tuple | None = None,
    fusion_threshold: int | None = None,
    cycle_time: float | None = None,
    mark_cycles: bool = False,
    launcher: str = "gloo",
    timeout: float = 240,
    cwd: str | None = None,
    trainer: str = "train_hvd",
) -> Recording:
    """Run ``hvdcourse.examples.<trainer>`` on ``np`` ranks and record a timeline into ``path``.

    ``trainer``: ``train_hvd`` (Keras) or ``train_torch_hvd`` (PyTorch).

    ``dynamic=None`` records the whole run (``HOROVOD_TIMELINE=<path>``); ``dynamic=(start, stop)``
    sets ``HOROVOD_TIMELINE=DYNAMIC`` and records only those training steps. ``train_args`` go to
    the trainer (e.g. ``["--epochs", "1", "--max-steps", "20"]``); checkpoints go to a fresh
    folder in ``cwd`` (default: a temporary folder, removed afterwards).
    """
    from hvdcourse.runtime.launch import run_ranks

    if trainer not in TRAINERS:
        raise ValueError(f"unknown trainer {trainer!r}; choose one of {', '.join(TRAINERS)}")
    path = os.path.abspath(path)
    if os.path.exists(path):
        os.remove(path)
    own_cwd = cwd is None
    cwd = cwd or tempfile.mkdtemp(prefix="hvdcourse-timeline-")
    env = knob_env(fusion_threshold, cycle_time, mark_cycles and dynamic is None)
    program = [sys.executable, "-m", "hvdcourse.course.lessons.timeline", "rank", "--out", path]
    program += ["--trainer", trainer]
    if dynamic is None:
        env["HOROVOD_TIMELINE"] = path
    else:
        env["HOROVOD_TIMELINE"] = "DYNAMIC"
        program += ["--dynamic", str(int(dynamic[0])), str(int(dynamic[1]))]
        if mark_cycles:
            program.append("--mark-cycles")
    program += ["--", "--no-resume", "--checkpoint-dir", os.path.join(cwd, "ckpt"), *train_args]
    try:
        run = run_ranks(program, np=np, launcher=launcher, timeout=timeout, env=env, cwd=cwd)
    finally:
        if own_cwd:  # only the checkpoints of the recorded run are in there
            shutil.rmtree(cwd, ignore_errors=True)
    return Recording(path, run)


def rank_main(argv) -> int:
    """What each rank runs under :func:`record`: a Horovod trainer, with the dynamic callback if asked."""
    parser = argparse.ArgumentParser(prog="hvdcourse.course.lessons.timeline rank")
    parser.add_argument("--out", required=True)
    parser.add_argument("--trainer", choices=TRAINERS, default="train_hvd")
    parser.add_argument("--dynamic", nargs=2, type=int, metavar=("START", "STOP"))
    parser.add_argument("--mark-cycles", action="store_true")
    parser.add_argument("train_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    if args.trainer == "train_torch_hvd":
        from hvdcourse.examples import train_torch_hvd as trainer

        make_hook = torch_dynamic_timeline
    else:
        from hvdcourse.examples import train_hvd as trainer

        make_hook = dynamic_timeline_callback
    callbacks = []
    if args.dynamic:
        callbacks.append(make_hook(args.out, *args.dynamic, mark_cycles=args.mark_cycles))
    return trainer.main(train_args, callbacks=callbacks)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.lessons.timeline",
        description="Record or summarise a Horovod timeline.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run the Horovod trainer on N ranks and record a timeline")
    rec.add_argument("--out", required=True, help="timeline file to write")
    rec.add_argument("-np", type=int, default=2)
    rec.add_argument("--launcher", default="gloo", choices=("gloo", "mpi", "mpirun"))
    rec.add_argument("--trainer", choices=TRAINERS, default="train_hvd", help="Keras or PyTorch")
    rec.add_argument(
        "--dynamic",
        nargs=2,
        type=int,
        metavar=("START", "STOP"),
        help="record only training steps START..STOP (HOROVOD_TIMELINE=DYNAMIC)",
    )
    rec.add_argument("--fusion-threshold", type=int, help="HOROVOD_FUSION_THRESHOLD in bytes")
    rec.add_argument("--cycle-time", type=float, help="HOROVOD_CYCLE_TIME in ms")
    rec.add_argument("--mark-cycles", action="store_true", help="add CYCLE_START markers")
    rec.add_argument("--timeout", type=float, default=300)
    rec.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then options of the trainer")
    show = sub.add_parser("show", help="print the time per phase of a timeline file")
    show.add_argument("file")
    sub.add_parser("rank", add_help=False)
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["rank"]:
        return rank_main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "show":
        events = read_trace(args.file)  # TimelineError: one line, exit 2
        spans = spans_from_events(events)
        print(phase_table(spans).round(3).to_string())
        print(summary(spans, events))
        return 0
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    result = record(
        args.out,
        train_args,
        np=args.np,
        dynamic=args.dynamic,
        fusion_threshold=args.fusion_threshold,
        cycle_time=args.cycle_time,
        mark_cycles=args.mark_cycles,
        launcher=args.launcher,
        timeout=args.timeout,
        trainer=args.trainer,
    )
    print(result.run.output[-3000:])
    if not result.ok:
        raise RunFailed(
            f"the run failed (exit {result.run.returncode}) or wrote no timeline at {result.path}; "
            "its output is above"
        )
    print(f"timeline written to {result.path}; open it in ui.perfetto.dev or chrome://tracing")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, stop_on_sigterm=sys.argv[1:2] != ["rank"]))  # (not in a rank)
