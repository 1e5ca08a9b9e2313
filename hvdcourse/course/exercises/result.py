"""What a check found, as learners read it and as the grader stores it.

A check declares its criteria (each worth some points) up front, so an exercise's maximum never
depends on how far a learner got; each criterion then passes or fails with a specific detail and a
hint. :meth:`CheckResult.report` is the text printed under the learner's cell.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import asdict, dataclass, field

NOT_CHECKED = "not checked: an earlier problem stopped the check"


class Stop(Exception):
    """Raised inside a check when the answer cannot be judged further (already recorded)."""


@dataclass
class Finding:
    """One criterion of an exercise and how the answer fared."""

    criterion: str
    points: float
    passed: bool = False
    detail: str = ""
    hint: str = ""


@dataclass
class CheckResult:
    """Outcome of one exercise's check; ``problem`` is set when the answer could not be judged at all."""

    exercise: str
    title: str
    findings: list = field(default_factory=list)
    problem: str = ""
    problem_hint: str = ""
    status: str = "checked"  # checked | not-done | error

    @property
    def score(self) -> float:
        return round(sum(f.points for f in self.findings if f.passed), 3)

    @property
    def max_score(self) -> float:
        return round(sum(f.points for f in self.findings), 3)

    @property
    def passed(self) -> bool:
        return self.status == "checked" and all(f.passed for f in self.findings)

    def report(self) -> str:
        head = f"{self.exercise_label} - {self.title}"
        if self.status == "not-done":
            hint = f"\n  Hint: {self.problem_hint}" if self.problem_hint else ""
            return f"{head}: not done yet. {self.problem}{hint}"
        if self.passed:
            return (
                f"{head}: all {len(self.findings)} checks passed ({self.score:g}/{self.max_score:g} points). "
                "Well done."
            )
        lines = [f"{head}: {self.score:g} of {self.max_score:g} points."]
        if self.problem:
            lines.append(f"  Problem: {self.problem}")
            if self.problem_hint:
                lines.append(f"  Hint: {self.problem_hint}")
        for f in self.findings:
            if f.passed:
                lines.append(f"  [ok]   {f.criterion}")
            elif f.detail != NOT_CHECKED:
                lines.append(f"  [FAIL] {f.criterion}")
                if f.detail:
                    lines.append(f"         {f.detail}")
                if f.hint:
                    lines.append(f"         Hint: {f.hint}")
        skipped = [f for f in self.findings if not f.passed and f.detail == NOT_CHECKED]
        if skipped:
            lines.append(
                f"  ({len(skipped)} more check(s) wait until the problems above are fixed)"
            )
        return "\n".join(lines)

    @property
    def exercise_label(self) -> str:
        digits = "".join(ch for ch in self.exercise if ch.isdigit())
        return f"Exercise {int(digits)}" if digits else self.exercise

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(score=self.score, max_score=self.max_score, passed=self.passed)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "CheckResult":
        findings = [Finding(**f) for f in data.get("findings", [])]
        keep = {
            k: data[k]
            for k in ("exercise", "title", "problem", "problem_hint", "status")
            if k in data
        }
        return cls(findings=findings, **keep)

    def __repr__(self) -> str:
        return f"<CheckResult {self.exercise}: {self.score:g}/{self.max_score:g} ({self.status})>"

    def _ipython_display_(self):
        """The check already printed its report; showing the object again would repeat it."""


class Checker:
    """Collects findings for the criteria declared in ``criteria`` ({key: (text, points)});
    ``after``: a line printed under the report once every check passed (where to go next)."""

    def __init__(self, exercise: str, title: str, criteria: dict, after: str = ""):
        self.result = CheckResult(exercise, title)
        self.after = after
        self._by_key = {}
        for key, (text, points) in criteria.items():
            finding = Finding(text, points)
            self._by_key[key] = finding
            self.result.findings.append(finding)
        self._decided = set()

    def ok(self, key: str) -> None:
        self._by_key[key].passed = True
        self._decided.add(key)

    def fail(self, key: str, detail: str, hint: str = "") -> None:
        finding = self._by_key[key]
        finding.passed, finding.detail, finding.hint = False, detail, hint
        self._decided.add(key)

    def judge(self, key: str, passed: bool, detail: str = "", hint: str = "") -> bool:
        """``ok`` or ``fail`` in one call; returns ``passed``."""
        (self.ok(key) if passed else self.fail(key, detail, hint))
        return passed

    def failed_any(self) -> bool:
        return any(not self._by_key[k].passed for k in self._decided)

    def stop(self, problem: str, hint: str = "", status: str = "error") -> None:
        """The answer cannot be judged further (not written yet, crashed, wrong type)."""
        self.result.problem, self.result.problem_hint, self.result.status = problem, hint, status

    def finish(self, quiet: bool = False) -> CheckResult:
        for key, finding in self._by_key.items():
            if key not in self._decided:
                finding.passed, finding.detail = False, NOT_CHECKED
        if not quiet:
            print(self.result.report(), flush=True)
            if self.after and self.result.passed:
                print(self.after, flush=True)
        return self.result


def check(exercise: str, title: str, criteria: dict, after: str = ""):
    """Make ``body(checker, *answers, **options)`` a check: ``check(*answers, quiet=False, **options)``
    (``after``: see :class:`Checker`).

    The check builds the :class:`Checker`, lets ``body`` judge (``raise Stop`` ends it early), prints
    the report unless ``quiet`` and returns the :class:`CheckResult`.
    """

    def wrap(body):
        @functools.wraps(body)
        def run(*answers, quiet: bool = False, **options) -> CheckResult:
            c = Checker(exercise, title, criteria, after)
            try:
                body(c, *answers, **options)
            except Stop:
                pass
            return c.finish(quiet)

        params = list(inspect.signature(body).parameters.values())[1:]
        quiet = inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, default=False)
        run.__signature__ = inspect.Signature(
            [
                p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.default is not p.empty else p
                for p in params
            ]
            + [quiet],
            return_annotation=CheckResult,
        )
        run.exercise, run.title = exercise, title
        return run

    return wrap
