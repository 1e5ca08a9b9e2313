"""The grader's own inputs: cases the judge checks beyond those the learner sees (lesson: Instructor guide).

A learner's notebook and self-check (``checks.ex03_sharding(shard_indices)``) use the inputs shown in
the exercise. When the grader runs a check, in the answer run and in the judge alike, it passes the
grader's own inputs as the check's ``hidden`` option as well, so an answer written for the visible
inputs only (a constant, a table of the expected values) fails where a function of the data does not.
The inputs themselves, and exercise 11's answer key, are in the instructor-only
:mod:`hvdcourse.course.grading.keys` (closed to learners' accounts by the class hub); this module holds
only the code that turns them into the checks' options. The judge reads the keys itself; the answer
run, whose sandbox user cannot read them, gets the inputs (never the answer keys) in its job file from
the runner (:func:`encode`, :func:`decode`).
"""

from __future__ import annotations

import ast
import functools
import json
import os


def variant_timeline(path: str, folder: str, drop: str, stretch: tuple) -> str:
    """A timeline made from ``path``: without the tensors whose phases name ``drop``, and with every
    time stretched by ``stretch`` (numerator, denominator), so that other phases and other totals
    come out; written into ``folder``."""
    with open(path, encoding="utf-8") as fh:
        events = json.load(fh)
    broadcast = {e.get("pid") for e in events if e.get("ph") == "B" and drop in str(e.get("name"))}
    kept = []
    for event in events:
        if event.get("pid") in broadcast:
            continue
        event = dict(event)
        if "ts" in event:
            event["ts"] = event["ts"] * stretch[0] // stretch[1]
        if "dur" in event:
            event["dur"] = event["dur"] * stretch[0] // stretch[1]
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


def keys():
    """The instructor-only :mod:`hvdcourse.course.grading.keys`, or :class:`PermissionError`."""
    try:
        from hvdcourse.course.grading import keys as found
    except (ImportError, PermissionError):
        found = None
    # a folder Python cannot read imports as an empty namespace package: no INPUTS then
    if not hasattr(found, "INPUTS"):
        raise PermissionError(
            "the grader's keys (hvdcourse/course/grading/keys) cannot be read here: they are "
            "the instructor's; grade as the instructor"
        )
    return found


def load() -> dict:
    """The grader's inputs (:data:`hvdcourse.course.grading.keys.INPUTS`), instructor-only."""
    return keys().INPUTS


def encode(inputs: dict) -> str:
    """``inputs`` as text for a job file (they are Python literals: int keys and tuples survive)."""
    return repr(inputs)


def decode(text) -> dict:
    """What :func:`encode` wrote ({} for nothing, or for text that is not a literal dict)."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def realise(ex_id: str, given):
    """The check's ``hidden`` option from the literal inputs ``given`` of exercise ``ex_id``."""
    if ex_id == "ex08":
        variant = given["variant"]
        return {
            "variant": functools.partial(
                variant_timeline, drop=variant["drop"], stretch=tuple(variant["stretch"])
            )
        }
    if ex_id == "ex09":
        choices = [
            (curves, floor, cap, best_setup(curves, floor, cap), lesson)
            for curves, floor, cap, lesson in given.get("choices", ())
        ]
        return {**given, "choices": choices}
    return given


def options(ex_id: str, inputs: dict | None = None, answers: bool = True) -> dict:
    """The keyword options the grader adds to exercise ``ex_id``'s check ({} when it has none).

    ``inputs``: the grader's inputs as :func:`decode` gave them (the answer run, which cannot read
    the keys); None: read them from the keys (the judge). ``answers``: with the answer keys the
    judge decides with (exercise 11's lines), read from the keys too."""
    if inputs is None:
        inputs = load()
    if ex_id == "ex11" and answers:
        return {"hidden": {"lines": keys().bug_answers()}}
    return {"hidden": realise(ex_id, inputs[ex_id])} if ex_id in inputs else {}
