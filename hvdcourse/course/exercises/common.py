"""Helpers shared by the exercise checks."""

from __future__ import annotations

import inspect
import traceback

import numpy as np

from hvdcourse.course.exercises import replay
from hvdcourse.course.exercises.result import Stop  # noqa: F401  (the checks raise it through this module)

PLACEHOLDER = 'raise NotImplementedError("Exercise'
NOT_DONE_HINT = "write your solution in place of the 'raise NotImplementedError(...)' line, run the cell, then this one"


def still_placeholder(fn) -> bool:
    """True if ``fn``'s source still contains the generated placeholder."""
    try:
        return PLACEHOLDER in inspect.getsource(fn)
    except (OSError, TypeError):
        return False


def answer_facts(fn, name: str) -> dict:
    """{'callable', 'type', 'repr', 'placeholder'} of an answer (recorded or replayed, see :mod:`replay`).

    In the judge the placeholder fact comes from the grader's own reading of the notebook's text
    (the stand-in's static facts), never from the process that ran the learner's code.
    """

    def compute():
        return {
            "value": {
                "callable": callable(fn),
                "type": type(fn).__name__,
                "repr": f"{fn!r:.60}",
                "placeholder": callable(fn) and still_placeholder(fn),
            }
        }

    mode = replay.current()
    facts = dict(
        compute()["value"] if mode is None else mode.observe("facts", name, (), compute)["value"]
    )
    if isinstance(fn, replay.StandIn):
        facts["placeholder"] = bool(fn.facts.get("placeholder"))
    return facts


def require_function(checker, fn, name: str) -> None:
    """Stop the check with a clear message unless ``fn`` is a finished function."""
    facts = answer_facts(fn, name)
    if not facts.get("callable"):
        checker.stop(
            f"expected your function {name}, got {facts.get('type')} {facts.get('repr')}",
            f"pass the function itself, without calling it: check({name})",
        )
        raise Stop
    if facts.get("placeholder"):
        checker.stop(f"{name} still raises NotImplementedError.", NOT_DONE_HINT, status="not-done")
        raise Stop


def where(err: BaseException) -> str:
    """'line N: code' of the deepest frame in the learner's own code (cells, not libraries)."""
    found = ""
    for frame in traceback.extract_tb(err.__traceback__):
        name = frame.filename
        if "site-packages" in name or "/hvdcourse/" in name or "/lib/python" in name:
            continue
        found = f"in {frame.name}(): {frame.line}" if frame.line else f"in {frame.name}()"
    return found


def attempt(fn, *args, name: str = "your function", key_args=None) -> dict:
    """``{'value': fn(*args)}`` or ``{'raised': {'type', 'message', 'where'}}``; recorded or replayed
    when the grader runs the check in two halves (see :mod:`hvdcourse.course.exercises.replay`); ``key_args``
    names the call in the record when its arguments differ between processes (a temporary path)."""

    def compute():
        try:
            return {"value": fn(*args)}
        # a learner's bug is an answer to explain, not a crash of the check
        except Exception as err:
            return {
                "raised": {
                    "type": type(err).__name__,
                    "message": str(err)[:500],
                    "where": where(err),
                }
            }

    mode = replay.current()
    return (
        compute()
        if mode is None
        else mode.observe("call", name, args if key_args is None else key_args, compute)
    )


def call(checker, fn, *args, name: str = "your function", key_args=None):
    """``fn(*args)``; on an exception stop the check with what was raised and where."""
    outcome = attempt(fn, *args, name=name, key_args=key_args)
    if "value" in outcome:
        return outcome["value"]
    raised = outcome["raised"]
    if raised["type"] == "NotImplementedError":
        checker.stop(f"{name} still raises NotImplementedError.", NOT_DONE_HINT, status="not-done")
        raise Stop
    place = raised["where"]
    checker.stop(
        f"{name} raised {raised['type']}: {raised['message']}" + (f" ({place})" if place else ""),
        "run it yourself on the example in the exercise and read the full error",
    )
    raise Stop


def fmt(values, limit: int = 8) -> str:
    """A short rendering of a list of numbers for messages."""
    values = list(values)
    text = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values[:limit])
    return f"[{text}{', ...' if len(values) > limit else ''}]"


ADAM_LR_HOW = "lr * hvd.size() ** 0.5"


def adam_lr_verdict(lrs, base: float, size: int) -> tuple:
    """(passed, detail, hint) for the learning rates an Adam training used on ``size`` ranks.

    Passes the course's rule (lesson: Converting a Keras MNIST script to Horovod), the square root
    of the workers for Adam (:func:`hvdcourse.examples.training.scaled_lr`), with or without a
    warm-up. Passes the linear rule too when it is reached through a warm-up: that is Horovod's own
    examples' recipe, which the lesson measures and calls a safe alternative at a few workers; the
    linear rule without a warm-up fails (SGD's rule, applied to Adam from the first step).
    """
    from hvdcourse.examples.training import scaled_lr

    want, linear = scaled_lr(base, size, "adam"), scaled_lr(base, size, "sgd")
    if not lrs:
        return False, "no learning rate was recorded: did the training run any step?", ""
    top = max(lrs)
    warmed = lrs[0] < top * 0.99
    if np.isclose(top, want) or (np.isclose(top, linear) and warmed):
        return True, "", ""
    detail = (
        f"the largest learning rate during training was {top:g}; for Adam on {size} workers the "
        f"lesson's rule gives {want:g} (lr x sqrt({size}))"
    )
    hint = f"{ADAM_LR_HOW}: the effective batch is N times larger and Adam's rate grows by sqrt(N)"
    if np.isclose(top, base):
        hint = "the rate is still the single-worker one: " + hint
    elif np.isclose(top, linear):
        hint = (
            f"lr * hvd.size() is the linear rule, made for SGD; Horovod's examples use it with Adam, "
            f"but only behind a warm-up. For Adam the course scales by the square root: {ADAM_LR_HOW}"
        )
    return False, detail, hint
