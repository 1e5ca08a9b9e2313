"""The grader's own inputs: cases the judge checks beyond those the learner sees (lesson: Instructor guide).

A learner's notebook and self-check (``checks.ex03_sharding(shard_indices)``) use the inputs shown in
the exercise. When the grader runs a check, in the answer run and in the judge alike, it passes these
as the check's ``hidden`` option as well, so an answer written for the visible inputs only (a constant,
a table of the expected values) fails where a function of the data does not. They live here, with the
grader, and not in the exercise sources or the learner-facing checks.
"""

from __future__ import annotations

import json
import os


def variant_timeline(path: str, folder: str) -> str:
    """A timeline made from ``path``: without the tensors that were broadcast, and with every time
    stretched by 3/2, so that other phases and other totals come out; written into ``folder``."""
    with open(path, encoding="utf-8") as fh:
        events = json.load(fh)
    broadcast = {
        e.get("pid") for e in events if e.get("ph") == "B" and "BROADCAST" in str(e.get("name"))
    }
    kept = []
    for event in events:
        if event.get("pid") in broadcast:
            continue
        event = dict(event)
        if "ts" in event:
            event["ts"] = event["ts"] * 3 // 2
        if "dur" in event:
            event["dur"] = event["dur"] * 3 // 2
        kept.append(event)
    out = os.path.join(folder, "timeline_grader.json")
    with open(out, "w", encoding="utf-8") as fh:
        fh.write("[\n" + ",\n".join(json.dumps(e) for e in kept) + "\n]\n")
    return out


def best_setup(curves: dict, min_efficiency: float, max_global_batch: int) -> tuple:
    """Exercise 9's answer: the fastest (batch, workers) within both limits."""
    allowed = [
        (ips, batch, n)
        for batch, curve in curves.items()
        for n, ips in curve.items()
        if batch * n <= max_global_batch and ips / (n * curve[1]) >= min_efficiency
    ]
    _, batch, n = max(allowed)
    return batch, n


def _choice(curves, floor, cap, lesson):
    return (curves, floor, cap, best_setup(curves, floor, cap), lesson)


INPUTS = {
    "ex01": [[[2.0, -1.0, 0.5], [4.0, 3.0, -2.0]], [[5.0], [-3.0], [1.0], [7.0], [0.0]]],
    "ex02": {"lengths": (6, 2)},
    "ex03": {"cases": [(7, 5), (23, 6), (998, 8)], "ranks_n": 1009},
    "ex04": {"length": 2053},
    "ex08": {"variant": variant_timeline},
    "ex09": {
        "curves": [{1: 80.0, 2: 150.0, 4: 260.0}],
        "choices": [
            _choice(
                {
                    16: {1: 50.0, 2: 96.0, 4: 180.0, 8: 300.0},
                    64: {1: 120.0, 2: 230.0, 4: 400.0, 8: 560.0},
                },
                0.75,
                512,
                "the fastest setup that qualifies",
            )
        ],
    },
    "ex10": {"cases": [(3, 2, 45, 7)]},
    "ex12": {"shards": [(5, 12, 3), (4, 6, 2)]},
    "ex13": {"bubbles": [(3, 5), (6, 3)], "schedules": [(3, 5)]},
}


def options(ex_id: str) -> dict:
    """The keyword options the grader adds to exercise ``ex_id``'s check ({} when it has none)."""
    return {"hidden": INPUTS[ex_id]} if ex_id in INPUTS else {}
