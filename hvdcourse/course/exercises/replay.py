"""Checks in two halves: observe the learner's answers in one process, judge in another (lesson: Instructor guide).

A check talks to a learner's answer only through :func:`hvdcourse.course.exercises.common.call`,
:func:`hvdcourse.course.exercises.common.require_function` and :func:`hvdcourse.course.exercises.harness.run_on_ranks`.
Those three consult the mode set here:

* no mode (a learner running a check in their notebook): they call the answer directly;
* :class:`Recorder` (the grader's *answer run*, a process that holds the learner's code): they call the
  answer and store what came back, as plain data, under a key made of the call and its arguments;
* :class:`Replayer` (the grader's *judge*, a process that never held learner code): they return the
  stored outcome for the same key, so the same check code judges with the same branches.

The stored data comes from a process the learner's code ran in, so it is untrusted: it is plain JSON
(decoded by :func:`decode` into lists, tuples, dicts, numbers, strings and numpy arrays of numbers,
never into objects with code), a key the judge asks for and cannot find counts as "no answer", and
the judge recomputes every expected value itself. All it can claim is what the learner's function
returned, which a learner's function controls anyway.
"""

from __future__ import annotations

import json

import numpy as np

MAX_VALUE_CHARS = 2_000_000  # one encoded answer value larger than this is not judged
MAX_DEPTH = 40
_MODE = [None]


class AnswerDataError(Exception):
    """The recorded answers are missing a call the check needs, or are malformed."""


class Opaque:
    """Stands for an object the answer returned that is not plain data (its type name and repr)."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = str(type_name)[:80], str(text)[:300]

    def __repr__(self):
        return self.text

    def __str__(self):
        return self.text


# ---------------------------------------------------------------- encoding
def encode(value, depth: int = 0):
    """``value`` as JSON-able tagged data (tuples, non-str keys and arrays survive the round trip)."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if np.isfinite(value) else {"__float": repr(value)}
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return {"__array": encode(value.tolist(), depth + 1), "dtype": value.dtype.kind}
    if isinstance(value, (list, tuple)):
        items = [encode(v, depth + 1) for v in value]
        return items if isinstance(value, list) else {"__tuple": items}
    if isinstance(value, (set, frozenset)):
        return {"__set": [encode(v, depth + 1) for v in value]}
    if isinstance(value, dict):
        return {"__dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    return {"__opaque": type(value).__name__, "repr": _safe_repr(value)}


def _safe_repr(value) -> str:
    try:
        return repr(value)[:300]
    except Exception as err:  # a learner's __repr__ may raise
        return f"<{type(value).__name__} (repr failed: {type(err).__name__})>"


def decode(data, depth: int = 0):
    """The inverse of :func:`encode` for untrusted data: only plain values, never code."""
    if depth > MAX_DEPTH:
        raise AnswerDataError("answer data nested too deeply")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v, depth + 1) for v in data]
    if not isinstance(data, dict) or len(data) > 2:
        raise AnswerDataError("malformed answer data")
    if "__tuple" in data:
        return tuple(decode(v, depth + 1) for v in _list(data["__tuple"]))
    if "__set" in data:
        return {_hashable(decode(v, depth + 1)) for v in _list(data["__set"])}
    if "__dict" in data:
        return {
            _hashable(decode(k, depth + 1)): decode(v, depth + 1)
            for k, v in (_pair(p) for p in _list(data["__dict"]))
        }
    if "__array" in data:
        kind = {"b": bool, "i": np.int64, "u": np.uint64, "f": np.float64}.get(data.get("dtype"))
        if kind is None:
            raise AnswerDataError("malformed array in the answer data")
        try:
            return np.asarray(decode(data["__array"], depth + 1), dtype=kind)
        except (TypeError, ValueError) as err:
            raise AnswerDataError(f"malformed array in the answer data ({err})") from None
    if "__float" in data:
        return float(_str(data["__float"]))
    if "__opaque" in data:
        return Opaque(_str(data["__opaque"]), _str(data.get("repr", "")))
    raise AnswerDataError("malformed answer data")


def _list(v):
    if not isinstance(v, list):
        raise AnswerDataError("malformed answer data")
    return v


def _str(v):
    if not isinstance(v, str):
        raise AnswerDataError("malformed answer data")
    return v


def _pair(p):
    if not (isinstance(p, list) and len(p) == 2):
        raise AnswerDataError("malformed answer data")
    return p


def _hashable(v):
    if isinstance(v, (list, np.ndarray)) or isinstance(v, (dict, set)):
        raise AnswerDataError("unhashable key in the answer data")
    return v


def key(kind: str, name: str, args) -> str:
    """The key of one observation: what was asked of which answer, with which arguments."""
    return json.dumps([kind, name, encode(args)], sort_keys=True)


# ---------------------------------------------------------------- modes
class Recorder:
    """Calls the real answers and records each outcome (runs where the learner's code is)."""

    def __init__(self):
        self.records = {}

    def observe(self, kind: str, name: str, args, compute):
        """``compute()``'s outcome ({'value': ...} or {'raised': ...}), recorded as data and returned."""
        k = key(kind, name, args)
        if k not in self.records:
            outcome = compute()
            if "value" in outcome:
                try:
                    encoded = encode(outcome["value"])
                    if len(json.dumps(encoded)) > MAX_VALUE_CHARS:
                        raise ValueError("too large")
                except (ValueError, TypeError, RecursionError) as err:
                    encoded = encode(
                        Opaque(
                            type(outcome["value"]).__name__,
                            f"<a value the grader cannot judge: {err}>",
                        )
                    )
                outcome = {"value": encoded}
            self.records[k] = outcome
        return _decoded(self.records[k])


class Replayer:
    """Answers the check's calls from recorded data (runs in the judge, with no learner code)."""

    def __init__(self, records: dict):
        if not isinstance(records, dict):
            raise AnswerDataError("malformed answer data")
        self.records = records

    def observe(self, kind: str, name: str, args, compute=None):
        k = key(kind, name, args)
        if k not in self.records:
            raise AnswerDataError(
                f"no recorded outcome for {name}{_short(args)}: the answer run did not "
                "finish (time or memory limit?) or its data was tampered with"
            )
        return _decoded(self.records[k])


def _decoded(outcome):
    if not isinstance(outcome, dict):
        raise AnswerDataError("malformed answer data")
    if "value" in outcome:
        return {"value": decode(outcome["value"])}
    raised = outcome.get("raised")
    if not isinstance(raised, dict):
        raise AnswerDataError("malformed answer data")
    return {"raised": {k: _str(raised.get(k, "")) for k in ("type", "message", "where")}}


def _short(args) -> str:
    text = repr(args)
    return text if len(text) < 60 else text[:57] + "..."


def current():
    return _MODE[0]


class mode:
    """``with replay.mode(Recorder()):`` runs checks in that mode."""

    def __init__(self, m):
        self.m = m

    def __enter__(self):
        self.saved, _MODE[0] = _MODE[0], self.m
        return self.m

    def __exit__(self, *exc):
        _MODE[0] = self.saved
        return False


class StandIn:
    """What the judge passes to a check in place of a learner's function: its name and static facts."""

    def __init__(self, name: str, facts: dict):
        self.__name__ = name
        self.facts = facts

    def __repr__(self):
        return self.facts.get("repr", f"<function {self.__name__}>")
