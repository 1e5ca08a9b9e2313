"""Run a learner's function on several ranks and collect what each rank saw.

The check side (:func:`run_on_ranks`) pickles the function with cloudpickle (so helpers and constants
it uses from the notebook travel with it), starts ``python -m hvdcourse.course.exercises.harness DIR`` on N
ranks through :func:`hvdcourse.runtime.launch.run_ranks` (timeout, whole process group killed), and reads
each rank's record from the course's results channel (:mod:`hvdcourse.runtime.results`). The rank side
runs a trusted *driver* from :mod:`hvdcourse.course.exercises.drivers` in its own folder ``DIR/rank<r>``
(so the files each rank writes can be told apart); the driver calls the learner's function and returns
plain data the check then judges. The learner's code runs in the rank's process, so what comes back is
untrusted: it is read as JSON only, and a record that is not a dict counts as no result. The rank
takes the channel's variable out of its environment before the learner's code runs, which keeps an
honest function from writing into the channel by accident; it is no barrier to code that looks for the
folder (the grader judges these records as the learner's data, never as proof).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import traceback
from dataclasses import dataclass, field

PAYLOAD = "payload.pkl"


@dataclass
class RanksOutcome:
    """What happened on the ranks: per-rank records, files each rank left, the launcher's output."""

    np: int
    problem: str = ""  # set when the ranks could not even be started
    records: dict = field(default_factory=dict)  # rank -> {"ok", "value" | "error", ...}
    files: dict = field(default_factory=dict)  # rank -> sorted relative paths written in rank<r>/
    output: str = ""
    timed_out: bool = False
    returncode: int = 0
    seconds: float = 0.0

    def values(self) -> list:
        return [self.records[r]["value"] for r in range(self.np)]

    @property
    def all_ok(self) -> bool:
        return len(self.records) == self.np and all(r.get("ok") for r in self.records.values())

    def first_error(self) -> dict | None:
        errors = [rec for _, rec in sorted(self.records.items()) if not rec.get("ok")]
        return errors[0] if errors else None


def run_on_ranks(
    driver: str, fn, np: int = 2, timeout: float = 90, forbid: tuple = (), **driver_args
) -> RanksOutcome:
    """Run ``drivers.<driver>(fn, rank, size, **driver_args)`` on ``np`` ranks under mpirun.

    When the grader runs the check in two halves, the outcome is recorded as data in the answer run
    and replayed in the judge (see :mod:`hvdcourse.course.exercises.replay`).
    """
    from hvdcourse.course.exercises import replay

    mode = replay.current()
    if mode is None:
        return _run_on_ranks(driver, fn, np, timeout, forbid, driver_args)
    args = {"np": np, "forbid": list(forbid), "args": driver_args}
    data = mode.observe(
        "ranks",
        driver,
        args,
        lambda: {"value": _as_data(_run_on_ranks(driver, fn, np, timeout, forbid, driver_args))},
    )["value"]
    return _from_data(np, data)


def _as_data(outcome: RanksOutcome) -> dict:
    return {
        "problem": outcome.problem,
        "records": {int(r): rec for r, rec in outcome.records.items()},
        "files": {int(r): list(f) for r, f in outcome.files.items()},
        "output": outcome.output[-4000:],
        "timed_out": bool(outcome.timed_out),
        "returncode": int(outcome.returncode or 0),
        "seconds": float(outcome.seconds),
    }


def _from_data(np: int, data) -> RanksOutcome:
    """A :class:`RanksOutcome` from recorded (untrusted) data; malformed parts count as missing."""
    from hvdcourse.course.exercises.replay import AnswerDataError

    if not isinstance(data, dict):
        raise AnswerDataError("malformed rank outcome in the answer data")
    records = {
        r: rec
        for r, rec in (data.get("records") or {}).items()
        if isinstance(r, int) and 0 <= r < np and isinstance(rec, dict)
    }
    files = {
        r: [str(f) for f in fs]
        for r, fs in (data.get("files") or {}).items()
        if isinstance(r, int) and isinstance(fs, (list, tuple))
    }
    return RanksOutcome(
        np,
        problem=str(data.get("problem") or ""),
        records=records,
        files=files,
        output=str(data.get("output") or ""),
        timed_out=bool(data.get("timed_out")),
        returncode=int(data.get("returncode") or 0)
        if isinstance(data.get("returncode"), int)
        else 0,
        seconds=float(data.get("seconds") or 0)
        if isinstance(data.get("seconds"), (int, float))
        else 0.0,
    )


def _run_on_ranks(driver, fn, np, timeout, forbid, driver_args) -> RanksOutcome:
    import cloudpickle

    from hvdcourse.runtime.launch import run_ranks

    workdir = tempfile.mkdtemp(prefix="hvdcourse-check-")
    try:
        try:
            with open(os.path.join(workdir, PAYLOAD), "wb") as fh:
                cloudpickle.dump(
                    {"driver": driver, "fn": fn, "args": driver_args, "forbid": list(forbid)}, fh
                )
        except Exception as err:  # e.g. the function uses a model or a lock defined in the notebook
            return RanksOutcome(
                np,
                problem=f"your function cannot be sent to the ranks ({type(err).__name__}: "
                f"{str(err)[:200]}); create what it needs inside the function",
            )
        run = run_ranks(
            [sys.executable, "-m", "hvdcourse.course.exercises.harness", workdir],
            np=np,
            launcher="mpirun",
            timeout=timeout,
            cwd=workdir,
            env={"TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"},
        )
        outcome = RanksOutcome(
            np,
            output=run.output,
            timed_out=run.timed_out,
            returncode=run.returncode,
            seconds=run.seconds,
        )
        for rank, reported in enumerate(run.results):
            # the harness reports once, after the learner's code
            if reported and isinstance(reported[-1], dict):
                outcome.records[rank] = reported[-1]
            rank_dir = os.path.join(workdir, f"rank{rank}")
            outcome.files[rank] = sorted(
                os.path.relpath(os.path.join(d, f), rank_dir)
                for d, _, names in os.walk(rank_dir)
                for f in names
            )
        return outcome
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def describe_failure(outcome: RanksOutcome) -> str:
    """One or two lines saying why the ranks did not all return a value."""
    if outcome.problem:
        return outcome.problem
    if outcome.timed_out:
        return (
            "the ranks did not finish in time and were stopped: is a rank waiting in a collective the "
            "other never calls, or is there an endless loop?"
        )
    error = outcome.first_error()
    if error is not None:
        where = f" ({error['where']})" if error.get("where") else ""
        return f"rank {error['rank']} raised {error['error']}{where}"
    missing = [r for r in range(outcome.np) if r not in outcome.records]
    tail = " | ".join(line for line in outcome.output.strip().splitlines()[-3:])
    return f"rank(s) {missing} stopped without a result (exit code {outcome.returncode}): {tail[-300:]}"


# ---------------------------------------------------------------- rank side
def launcher_rank_size() -> tuple:
    """This rank and the number of ranks, as the launcher announced them (0 and 1 without one)."""
    from hvdcourse.runtime.ranks import launcher_rank, launcher_size

    return launcher_rank(), launcher_size()


def _learner_frame(tb) -> str:
    """'line N of your function' for the deepest frame that is not course or library code."""
    from hvdcourse.runtime.paths import PACKAGE as here

    found = ""
    for frame in traceback.extract_tb(tb):
        name = frame.filename
        if (
            name.startswith(here)
            or "site-packages" in name
            or name.startswith(sys.prefix)
            or name.startswith(sys.base_prefix)
        ):
            continue
        found = f"in {frame.name}: {frame.line}" if frame.line else f"in {frame.name}"
    return found


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from hvdcourse.runtime import results

    workdir = os.path.abspath(argv[0])
    rank, size = launcher_rank_size()
    # the learner's code (and what it starts) must not find the results folder: only this function reports
    channel = {**os.environ, results.VARIABLE: os.environ.pop(results.VARIABLE, "")}
    rank_dir = os.path.join(workdir, f"rank{rank}")
    os.makedirs(rank_dir, exist_ok=True)
    os.chdir(rank_dir)
    record = {"rank": rank, "size": size}
    try:
        import importlib

        import cloudpickle

        with open(os.path.join(workdir, PAYLOAD), "rb") as fh:
            payload = cloudpickle.load(fh)
        for name in payload["forbid"]:
            sys.modules[name] = None  # ``import`` of it now raises ImportError
        drivers = importlib.import_module("hvdcourse.course.exercises.drivers")
        value = getattr(drivers, payload["driver"])(payload["fn"], rank, size, **payload["args"])
        record.update(ok=True, value=value)
    except BaseException as err:  # noqa: B902 - a learner's sys.exit() is an answer to report too
        record.update(
            ok=False,
            error=f"{type(err).__name__}: {err}"[:600],
            type=type(err).__name__,
            where=_learner_frame(err.__traceback__),
        )
    # values JSON cannot hold: their repr
    results.report(json.loads(json.dumps(record, default=repr)), channel)
    sys.stdout.flush()
    if not record["ok"]:
        # a non-zero exit makes mpirun stop the other ranks instead of leaving them waiting
        os._exit(3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
