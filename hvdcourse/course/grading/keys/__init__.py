"""The grader's answer keys: instructor-only (lesson: Instructor guide).

Only the grader reads this folder: the judge (:mod:`hvdcourse.course.grading.judge`), and the runner,
which hands the hidden inputs to the answer run in its job file. No learner-facing code imports it; in
a class deployment the hub closes it (:mod:`hvdcourse.course.hub.private`), so a learner's account
cannot read it. The full list of what counts as an answer key, and where each lives, is in that
module's docstring.

- :data:`INPUTS`: the grader's own inputs per exercise, passed to each check as ``hidden`` (see
  :mod:`hvdcourse.course.grading.hidden`, which turns them into the checks' options);
- :data:`BUG_PATTERNS`: exercise 11's answer, where each planted mistake of the buggy script shows
  (a regex of its lines); :func:`bug_lines` reads the line numbers off the script. The learners'
  self-check only holds salted digests of the (kind, line) pairs (:func:`bug_digests`, copied into
  ``checks_tools.BUG_DIGESTS``; a test keeps the two in step).

Everything here is a Python literal (:func:`hvdcourse.course.grading.hidden.encode` writes it into the
answer run's job with ``repr`` and reads it back with :func:`ast.literal_eval`).
"""

from __future__ import annotations

import re

INPUTS = {
    "ex01": [[[2.0, -1.0, 0.5], [4.0, 3.0, -2.0]], [[5.0], [-3.0], [1.0], [7.0], [0.0]]],
    "ex02": {"lengths": (6, 2)},
    "ex03": {"cases": [(7, 5), (23, 6), (998, 8)], "ranks_n": 1009},
    "ex04": {"length": 2053},
    # a timeline made from the exercise's: without the broadcast tensors, every time stretched by 3/2
    "ex08": {"variant": {"drop": "BROADCAST", "stretch": (3, 2)}},
    "ex09": {
        "curves": [{1: 80.0, 2: 150.0, 4: 260.0}],
        # (curves, min_efficiency, max_global_batch, the mistake that case exposes); the answer is
        # computed by hidden.best_setup
        "choices": [
            (
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

# exercise 11: kind -> regex of the lines of buggy_train_hvd.py where the mistake can be pointed at
BUG_PATTERNS = {
    "undefined-name": r"train_data = train_data\.shard",
    "unsharded-data": r"model\.fit\(x_train|^x_train, y_train = ",
    "unscaled-lr": r"^lr = |Adam\(learning_rate=lr\)",
    "warmup-argument": r"LearningRateWarmupCallback\(",
    "missing-broadcast": r"^callbacks = \[|LearningRateWarmupCallback|ModelCheckpoint|^\]",
    "every-rank-checkpoints": r"ModelCheckpoint\(",
    "unaveraged-metrics": r"x_test = data\.shard|y_test = data\.shard|^callbacks = \[|^\]",
}


def bug_lines(kind: str) -> set:
    """The line numbers (1-based) of the buggy script where the mistake ``kind`` can be pointed at."""
    from hvdcourse.course.exercises.checks_tools import buggy_script_lines

    pattern = re.compile(BUG_PATTERNS[kind])
    return {n for n, line in enumerate(buggy_script_lines(), 1) if pattern.search(line)}


def bug_answers() -> dict:
    """Exercise 11's key as the judge passes it: ``{kind: sorted line numbers}``."""
    return {kind: sorted(bug_lines(kind)) for kind in BUG_PATTERNS}


def bug_digests() -> dict:
    """``{kind: digests of its right lines}``: what ``checks_tools.BUG_DIGESTS`` must hold."""
    from hvdcourse.course.exercises.checks_tools import bug_digest

    return {kind: sorted(bug_digest(kind, n) for n in bug_lines(kind)) for kind in BUG_PATTERNS}
