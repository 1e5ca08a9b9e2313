"""The judge: points from the answer data, in a process no learner code ever ran in (lesson: Instructor guide).

Started by the grader as ``python -I -c ...`` with a clean environment and the course's own package
on its path (the folder the grader itself was loaded from; the sandbox's user cannot write there),
after the answer run has exited and every process of the notebook was killed. It reads one JSON
job on stdin: the exercises, the facts the grader read from the notebook's text
(:mod:`hvdcourse.course.grading.extract`) and the answer data (:mod:`hvdcourse.course.grading.answers`, untrusted).
It runs each check in replay mode (:class:`~hvdcourse.course.exercises.replay.Replayer`): the same check
code that learners run, with every call to their code answered from the data, and every expected
value computed here, on the inputs the learner saw and on the grader's own
(:mod:`hvdcourse.course.grading.hidden`). The results go to stdout, a pipe only the grader holds.
"""

from __future__ import annotations

import json
import sys


def answers_for(exercise, static: dict, replayer):
    """The values to pass to the check, the missing names, and a note for names left out."""
    from hvdcourse.course.exercises import replay

    values, missing, notes = [], [], []
    for name in exercise.answers:
        facts = static.get(name) or {"kind": "missing"}
        kind = facts.get("kind")
        if kind in ("missing", "left-out"):
            missing.append(name)
            values.append(None)
            if kind == "left-out":
                notes.append(
                    f"{name} is only defined in cell {facts.get('cell')} by a statement the grader does "
                    "not run (only imports, definitions and constants are kept)"
                )
        elif kind == "literal":
            values.append(replay.decode(facts.get("value")))
        elif kind in ("function", "class", "import"):
            values.append(replay.StandIn(name, facts))
        else:  # a constant expression: its value as the answer run computed it
            try:
                values.append(replayer.observe("value", name, ())["value"])
            except replay.AnswerDataError:
                missing.append(name)
                values.append(None)
    return values, missing, notes


def judge(job: dict) -> list:
    from hvdcourse.course.exercises import replay
    from hvdcourse.course.exercises.checks import EXERCISES
    from hvdcourse.course.exercises.result import CheckResult
    from hvdcourse.course.grading import hidden

    data = job.get("answers")
    records = data.get("records") if isinstance(data, dict) else None
    replayer = replay.Replayer(records if isinstance(records, dict) else {})
    results = []
    for ex_id in job["exercises"]:
        exercise = EXERCISES[ex_id]
        try:
            values, missing, notes = answers_for(exercise, job["static"], replayer)
            with replay.mode(replayer):
                result = exercise.check(*values, quiet=True, **hidden.options(ex_id))
        except replay.AnswerDataError as err:
            result = CheckResult(
                ex_id,
                exercise.title,
                problem=f"your answers could not be judged: {err}",
                status="error",
            )
            missing, notes = [], []
        except Exception as err:  # malformed answer data must never take the batch down
            result = CheckResult(
                ex_id,
                exercise.title,
                problem=f"your answers could not be judged: {type(err).__name__}: {str(err)[:200]}",
                status="error",
            )
            missing, notes = [], []
        if not result.findings:  # an error before the check declared its criteria: keep the maximum
            result.findings = exercise.check(*([None] * len(exercise.answers)), quiet=True).findings
            for f in result.findings:
                f.passed = False
        if missing:
            for f in result.findings:
                f.passed = False
            result.problem = f"the notebook defines no {', '.join(missing)}" + (
                f" ({'; '.join(notes)})" if notes else ""
            )
            result.problem_hint = (
                "keep the names given in the exercise, and run every cell before submitting"
            )
            result.status = "error"
        results.append(result.to_dict())
    return results


def main() -> int:
    import resource

    job = json.loads(sys.stdin.read())
    results = judge(job)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = json.dumps({"results": results, "cpu": round(usage.ru_utime + usage.ru_stime, 2)})
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
