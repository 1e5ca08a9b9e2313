"""One worker killed, three ways: plain Horovod, Horovod Elastic and Ray Train side by side (lesson:
Horovod and Ray Train, side by side).

The same model and data (the course's CNN on MNIST, 2 workers, batch 32 per worker) lose worker 1
to ``SIGKILL`` in the middle of an epoch. The plain Horovod and Ray Train runs are the same training
(``--max-steps`` steps per epoch, killed after ``KILL_STEP`` steps); the Elastic run is longer (full
epochs, killed later: see :func:`horovod_elastic`), so that a new worker has time to join before the end.
Under:

* **plain Horovod** (``mpirun``, ``train_hvd``, rank 0 checkpoints each epoch): ``mpirun`` ends the
  job and names the rank; the same command started again resumes from the last checkpoint
  (:mod:`hvdcourse.course.lessons.faults`; here it is restarted at once, on a cluster a requeue or a person
  does it);
* **Horovod Elastic** (``horovodrun`` with a discovery script, ``train_elastic``, a commit every
  step): the survivor rolls back to the last commit and goes on alone; a host that appears in the
  discovery script meanwhile (the machine under a third name) brings the job back to 2 workers;
* **Ray Train** (``train_ray_tf``, ``--max-failures 1``, a checkpoint reported each epoch): Ray
  restarts the worker group, which resumes from the last checkpoint Ray has registered.

For each: the seconds from the kill until the system reacts (**detect**: the job ends, the
elastic driver reports the exit, Ray reports the failed worker group) and until training steps
again (**recover**), the **epochs lost** (steps done again after the restart, in epochs), the
**final test accuracy** and the workers at the end. Times come from the processes' own clocks
(the kill and the first step after it write their time), so the load of the machine is in them:
:func:`record` stores the machine and its load with the table.

``python -m hvdcourse.course.lessons.fault_compare --record book/data/fault_compare.json`` runs all three
(minutes on 2 cores; more on a busy machine) and writes the table that the lesson shows; :func:`ray_train` alone is
what the lesson runs live and ``tests/records/test_fault_compare.py`` checks.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

from hvdcourse.runtime.errors import run_cli

WORKERS = 2
EPOCHS = 4
STEPS = 20  # --max-steps: steps per epoch of 2 workers (MNIST offline subset: 125 at batch 32)
KILL_STEP = 50  # worker 1 is killed after its 50th step: epoch 3, 10 steps after its start
BATCH = 32
TIMEOUT = 300
LONG_TIMEOUT = 480  # Elastic: full epochs; Ray: its start may need 3 tries (examples.ray_local)
# where each line of the elastic driver and Ray's controller says that a worker is gone
ELASTIC_EXIT = "exit with status code"
RAY_FAILURE = ("WorkerGroupError", "health check failed", "died unexpectedly")


@dataclass
class Outcome:
    """One row of the table."""

    system: str
    detect_seconds: float | None  # kill -> the system reports it
    recover_seconds: float | None  # kill -> training steps again
    epochs_lost: float  # steps done again after the restart, in epochs
    final_accuracy: float | None
    workers: str  # workers before the kill -> after it (-> at the end)
    how: str  # what brought training back
    ok: bool = True
    details: dict = field(default_factory=dict)


def _args(epochs: int, steps: int, checkpoints: bool = True) -> list:
    args = ["--epochs", str(epochs), "--max-steps", str(steps), "--batch-size", str(BATCH)]
    return args + (["--checkpoint-dir", "ckpt"] if checkpoints else [])


def plain_horovod(
    work: str, epochs: int = EPOCHS, steps: int = STEPS, kill_step: int = KILL_STEP
) -> Outcome:
    """``mpirun -np 2 train_hvd``, rank 1 killed; then the same command again, resuming."""
    from hvdcourse.course.lessons import faults
    from hvdcourse.runtime.launch import run_ranks

    folder = os.path.join(work, "horovod")
    os.makedirs(folder, exist_ok=True)
    args = [*_args(epochs, steps), "--warmup-epochs", "0"]
    killed, ended_after = faults.run_with_fault(
        args, mode="kill", rank=1, at_step=kill_step, launcher="mpirun", cwd=folder, timeout=TIMEOUT
    )
    first_step = []
    start = time.monotonic()

    def on_line(line):
        if not first_step and "first step:" in line:
            first_step.append(time.monotonic() - start)

    resumed = run_ranks(
        [
            sys.executable,
            "-m",
            "hvdcourse.course.lessons.faults",
            "hvdcourse.examples.train_hvd",
            *args,
        ],
        np=WORKERS,
        launcher="mpirun",
        timeout=TIMEOUT,
        env={"HVDCOURSE_PRINT_STATE": "1"},
        cwd=folder,
        on_line=on_line,
    )
    restored = resumed.records("restored")
    restored_epoch = restored[0]["epoch"] if restored else 0
    final = resumed.records("final")
    ok = not killed.ok and resumed.ok and bool(first_step) and ended_after is not None
    return Outcome(
        "Horovod (mpirun)",
        round(ended_after, 1) if ended_after is not None else None,
        round(ended_after + first_step[0], 1) if ok else None,
        round((kill_step - restored_epoch * steps) / steps, 2),
        final[0]["accuracy"] if final else None,
        f"{WORKERS} -> 0 -> {WORKERS}",
        "the job ends (naming the rank); started again, it resumes from rank 0's checkpoint",
        ok,
        {
            "failure_line": killed.failure,
            "restored_epoch": restored_epoch,
            "restart_to_first_step_seconds": round(first_step[0], 1) if first_step else None,
        },
    )


def horovod_elastic(
    work: str, epochs: int = 5, steps: int | None = None, kill_step: int = 150
) -> Outcome:
    """``horovodrun`` elastic, ``train_elastic``, rank 1 killed; at the kill, the discovery script
    starts listing the machine under a third name, so a new worker can join.

    The defaults make the run long enough (full epochs: 125 steps per epoch with 2 workers, 250 with one) for the
    new worker to start and join before the end.
    """
    from hvdcourse.examples.train_elastic import run_on_this_machine

    folder = os.path.join(work, "elastic")
    os.makedirs(folder, exist_ok=True)
    args = ["--epochs", str(epochs), "--batch-size", str(BATCH), "--threads", "1"]
    if steps:
        args += ["--max-steps", str(steps)]
    two_names = [("localhost", 1), ("127.0.0.1", 1)]
    run, events = run_on_this_machine(
        args,
        os.path.join(folder, "hosts.txt"),
        two_names,
        then_hosts=[*two_names, (socket.gethostname(), 1)],
        when="[hvdcourse.faults]",  # the kill: from now on the discovery script lists a 3rd name
        # once: the worker that joins later is rank 1 too, and must not die at its own step 150
        fault=dict(
            rank=1, at_step=kill_step, mode="kill", once=os.path.join(folder, "killed.json")
        ),
        timeout=LONG_TIMEOUT,  # full epochs: minutes on a busy machine
        cwd=folder,
        also=(ELASTIC_EXIT,),
    )
    starts, done = events["starts"], events["done"]
    fault = events.get("fault")
    exited = events.get(ELASTIC_EXIT)
    # the steps done again: from the kill back to the commit the survivors restarted from
    again = kill_step - starts[1]["optimizer_iterations"] if len(starts) > 1 else 0
    regrown = [t for t, w in events["start_times"] if w == WORKERS and fault and t > fault]
    workers = " -> ".join(str(s["workers"]) for s in starts)
    return Outcome(
        "Horovod Elastic",
        round(exited - fault, 1) if exited and fault else None,
        round(events["resumed"] - fault, 1) if "resumed" in events and fault else None,
        round(again / starts[0]["steps_per_epoch"], 2),
        done[0]["accuracy"] if done else None,
        workers,
        "the survivor rolls back to the last commit and goes on; a new host brings a 2nd worker back",
        run.ok and len(starts) > 1,
        {
            "regrown_after_seconds": round(regrown[0] - fault, 1) if regrown else None,
            "output_tail": run.output[-3000:] if not run.ok else "",
        },
    )


def ray_fault_callback(rank: int, at_step: int, marker: str):
    """A Keras callback for Ray Train workers: Ray worker ``rank`` kills itself (SIGKILL) after
    ``at_step`` steps, once per ``marker`` file.

    The callback is pickled and sent to every worker, so the rank is checked where it runs
    (``ray.train.get_context()``). The kill writes the time to ``marker``; the restarted rank 0
    writes the time of its first step to ``marker + ".resumed"``; a
    restarted worker never kills itself again (:func:`hvdcourse.course.lessons.faults.first_time`). With
    ``train_ray_tf.main(argv, callbacks=[...])``.
    """
    import tensorflow as tf

    from hvdcourse.course.lessons.faults import fail, first_time

    class RayWorkerFault(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.steps, self.first = 0, True

        def on_train_batch_begin(self, batch, logs=None):
            if not self.first:
                return
            self.first = False
            import ray.train

            # The first workers all take their first step before any of them reaches ``at_step``
            # (each step waits for the others' gradients), so a worker that finds the marker at
            # its first step is a restarted one. (Not the process's start time: psutil derives it
            # from the boot time in whole seconds, and Ray starts the new worker within a second.)
            if os.path.exists(marker) and ray.train.get_context().get_world_rank() == 0:
                _write(marker + ".resumed", {"time": time.time()})

        def on_train_batch_end(self, batch, logs=None):
            import ray.train

            self.steps += 1
            me = ray.train.get_context().get_world_rank()
            if self.steps == at_step and me == rank and first_time(marker, {"rank": me}):
                fail("kill", me, self.steps)

    return RayWorkerFault()


def _write(path: str, record: dict) -> None:
    with open(path + ".tmp", "w") as fh:
        json.dump(record, fh)
    os.replace(path + ".tmp", path)  # whole or absent, for the reader


def _read(path: str) -> dict | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def ray_run(argv: list, marker: str, rank: int = 1, at_step: int = KILL_STEP) -> int:
    """``train_ray_tf.main(argv)`` with :func:`ray_fault_callback` (what ``ray-run`` runs)."""
    from hvdcourse.examples import train_ray_tf

    return train_ray_tf.main(argv, callbacks=[ray_fault_callback(rank, at_step, marker)])


def ray_train(
    work: str, epochs: int = EPOCHS, steps: int = STEPS, kill_step: int = KILL_STEP
) -> Outcome:
    """``train_ray_tf --max-failures 1`` on 2 Ray workers, worker 1 killed once after ``kill_step`` steps."""
    from hvdcourse.runtime.launch import run_ranks

    folder = os.path.join(work, "ray")
    os.makedirs(folder, exist_ok=True)
    marker = os.path.join(folder, "killed.json")
    detected = []

    def on_line(line):
        if not detected and _read(marker) and any(word in line for word in RAY_FAILURE):
            detected.append(time.time())

    run = run_ranks(
        [
            sys.executable,
            "-m",
            "hvdcourse.course.lessons.fault_compare",
            "ray-run",
            "--marker",
            marker,
            "--at-step",
            str(kill_step),
            "--",
            *_args(epochs, steps),
            "--workers",
            str(WORKERS),
            "--max-failures",
            "1",
            "--no-resume",
            "--warmup-epochs",
            "0",
        ],
        np=1,
        launcher="python",
        timeout=LONG_TIMEOUT,
        cwd=folder,
        on_line=on_line,
    )
    killed, resumed = _read(marker), _read(marker + ".resumed")
    final = run.records("final")
    record = final[0] if final else {}
    # the epoch the restarted workers started from: Ray's history of reports
    restarts = [row["start_epoch"] for row in record.get("history", []) if row.get("start_epoch")]
    start_epoch = min(restarts) if restarts else 0
    return Outcome(
        "Ray Train",
        round(detected[0] - killed["time"], 1) if detected and killed else None,
        round(resumed["time"] - killed["time"], 1) if resumed and killed else None,
        round((kill_step - start_epoch * steps) / steps, 2),
        record.get("accuracy"),
        f"{WORKERS} -> {WORKERS}",
        "Ray restarts the worker group, which resumes from the last checkpoint Ray registered",
        run.ok and bool(killed) and bool(resumed),
        {
            "resumed_from_epoch": start_epoch,
            "killed": bool(killed),
            "restarted_worker_stepped": bool(resumed),
            "ray": record.get("ray"),
            "output_tail": run.output[-3000:] if not run.ok else "",
        },
    )


SCENARIOS = {"horovod": plain_horovod, "elastic": horovod_elastic, "ray": ray_train}


def compare(work: str | None = None, which=tuple(SCENARIOS)) -> list:
    """Run the scenarios ``which`` one after the other; their :class:`Outcome` s, each with the
    date and the machine's load averages at the end of its run in ``details``."""
    import datetime

    work = work or tempfile.mkdtemp(prefix="hvdcourse-fault-compare-")
    outcomes = []
    for name in which:
        outcome = SCENARIOS[name](work)
        outcome.details["ended"] = datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        )
        outcome.details["load_average_1_5_15min"] = [round(x, 2) for x in os.getloadavg()]
        outcomes.append(outcome)
    return outcomes


def table(outcomes) -> "object":
    """The comparison as a pandas DataFrame, one row per system."""
    import pandas as pd

    rows = [o if isinstance(o, dict) else asdict(o) for o in outcomes]
    return pd.DataFrame(
        {
            "time to detect (s)": [r["detect_seconds"] for r in rows],
            "time to recover (s)": [r["recover_seconds"] for r in rows],
            "epochs lost": [r["epochs_lost"] for r in rows],
            "final test accuracy": [r["final_accuracy"] for r in rows],
            "workers": [r["workers"] for r in rows],
        },
        index=pd.Index([r["system"] for r in rows], name="worker 1 killed under"),
    )


def record(path: str, outcomes) -> dict:
    """Write the outcomes with the machine, its load and the run's settings to ``path``.

    If ``path`` holds an earlier record, its rows of the systems not in ``outcomes`` are kept (a
    rerun of one system, ``--only``), in the order of :data:`SCENARIOS`; each row names its own date
    and load.
    """
    from hvdcourse.runtime.machine import describe_machine

    rows = {o.system: asdict(o) for o in outcomes}
    if os.path.exists(path):
        with open(path) as fh:
            for old in json.load(fh)["outcomes"]:
                rows.setdefault(old["system"], old)
    order = ["Horovod (mpirun)", "Horovod Elastic", "Ray Train"]

    data = {
        "machine": describe_machine(),
        "settings": {
            "workers": WORKERS,
            "batch_per_worker": BATCH,
            "epochs": EPOCHS,
            "steps_per_epoch": STEPS,
            "kill_step": KILL_STEP,
            "elastic": "5 full epochs (125 steps per epoch with 2 workers, 250 with one), rank 1 killed after its step 150",
        },
        "outcomes": [rows[name] for name in order if name in rows],
    }
    with open(path, "w") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
    return data


def main(argv=None) -> int:
    """``python -m hvdcourse.course.lessons.fault_compare --record FILE`` (or ``ray-run``, used by :func:`ray_train`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ray-run"]:
        p = argparse.ArgumentParser(prog="python -m hvdcourse.course.lessons.fault_compare ray-run")
        p.add_argument("--marker", required=True)
        p.add_argument("--at-step", type=int, default=KILL_STEP)
        p.add_argument("--rank", type=int, default=1)
        p.add_argument("args", nargs=argparse.REMAINDER)
        a = p.parse_args(argv[1:])
        rest = a.args[1:] if a.args[:1] == ["--"] else a.args
        return ray_run(rest, a.marker, a.rank, a.at_step)
    p = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.lessons.fault_compare",
        description="Kill one of 2 workers under plain Horovod, Horovod Elastic and Ray Train; "
        "print the table (time to detect, to recover, epochs lost, final accuracy).",
    )
    p.add_argument("--record", metavar="JSON", help="also write the table and the machine here")
    p.add_argument("--only", choices=list(SCENARIOS), action="append", help="run only these")
    args = p.parse_args(argv)
    outcomes = compare(which=tuple(args.only or SCENARIOS))
    print(table(outcomes).to_string())
    if args.record:
        record(args.record, outcomes)
    failed = [o.system for o in outcomes if not o.ok]
    if failed:
        print(
            f"fault_compare: these runs did not behave as expected: {', '.join(failed)}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, stop_on_sigterm=True))
