"""Helpers shared by the exercise checks (lesson: all exercises)."""
from __future__ import annotations

import inspect
import traceback

from hvdcourse.exercises.result import Stop  # noqa: F401  (the checks raise it through this module)

PLACEHOLDER = 'raise NotImplementedError("Exercise'
NOT_DONE_HINT = "write your solution in place of the 'raise NotImplementedError(...)' line, run the cell, then this one"


def still_placeholder(fn) -> bool:
    """True if ``fn``'s source still contains the generated placeholder."""
    try:
        return PLACEHOLDER in inspect.getsource(fn)
    except (OSError, TypeError):
        return False


def require_function(checker, fn, name: str) -> None:
    """Stop the check with a clear message unless ``fn`` is a finished function."""
    if not callable(fn):
        checker.stop(f"expected your function {name}, got {type(fn).__name__} {fn!r:.60}",
                     f"pass the function itself, without calling it: check({name})")
        raise Stop
    if still_placeholder(fn):
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


def call(checker, fn, *args, name: str = "your function"):
    """``fn(*args)``; on an exception stop the check with what was raised and where."""
    try:
        return fn(*args)
    except NotImplementedError:
        checker.stop(f"{name} still raises NotImplementedError.", NOT_DONE_HINT, status="not-done")
        raise Stop from None
    except Exception as err:  # a learner's bug is an answer to explain, not a crash of the check
        place = where(err)
        checker.stop(f"{name} raised {type(err).__name__}: {err}" + (f" ({place})" if place else ""),
                     "run it yourself on the example in the exercise and read the full error")
        raise Stop from None


def fmt(values, limit: int = 8) -> str:
    """A short rendering of a list of numbers for messages."""
    values = list(values)
    text = ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values[:limit])
    return f"[{text}{', ...' if len(values) > limit else ''}]"
