"""Ray for the course's Ray Train scripts: started by the script, and gone afterwards (lesson: Horovod
and Ray Train, side by side).

:func:`session` starts a private local Ray instance (bounded CPUs, no dashboard, no token
authentication) or joins a running cluster (``address``, e.g. the one a Slurm job started), and
guarantees on leaving that no process of a local instance survives: ``ray.shutdown()`` first, then
every process that still carries this session's marker in its environment (the raylet, the GCS
server, ``ray::`` workers, log monitors: Ray starts them all from this process, so they inherit it)
is ended through :mod:`hvdcourse.runtime.processes`. Other Ray instances on the machine (another
user's, another job's) carry other markers and are left alone, which ``ray stop --force`` would not do.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid

from hvdcourse.runtime import processes
from hvdcourse.runtime.errors import RunFailed

# set in this process while a local Ray instance runs; every process Ray starts inherits it
MARKER = "HVDCOURSE_RAY_SESSION"
# On a busy machine (load average far above the cores) Ray 2.60's raylet can abort at start: it waits
# a fixed time for its dashboard agent (started even without a dashboard) to report its ports, and
# ray.init says "timed out during startup". Another start usually succeeds.
STARTS = 3
# Ray 2.60 asks for a token it writes to ~/.ray unless told not to; a local private instance needs none
QUIET_ENV = {"RAY_AUTH_MODE": "disabled"}


def leftovers(token: str) -> list:
    """Live processes of the local Ray session ``token`` (normally none once it has ended)."""
    return processes.with_env(MARKER, token)


@contextlib.contextmanager
def session(num_cpus: int, address: str | None = None):
    """Run Ray inside the ``with`` block; yield the session's marker (``None`` when joining a cluster).

    ``address=None`` starts a new local instance of ``num_cpus`` CPUs (``address="local"``: never
    attach to an instance someone else started on this machine); ``address="auto"`` or
    ``"host:port"`` joins a running cluster, which is left running.
    """
    import ray

    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    token = None
    if address is None:
        token = uuid.uuid4().hex
        os.environ[MARKER] = token  # Ray's processes, started from here, inherit it
        init = dict(address="local", num_cpus=num_cpus, include_dashboard=False)
    else:
        init = dict(address=address)
    try:
        for attempt in range(1, STARTS + 1):
            try:
                ray.init(**init, log_to_driver=True, configure_logging=False)
                break
            except Exception as err:  # Ray's fixed start-up limits (STARTS)
                if "timed out during startup" not in str(err):
                    raise
                if attempt == STARTS:
                    raise RunFailed(
                        f"Ray did not start in {STARTS} tries ({err}) with a load average of "
                        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; run again when the "
                        "machine is less busy"
                    ) from None
                print(f"[ray_local] {err} Starting again ({attempt + 1}/{STARTS}).", flush=True)
                ray.shutdown()
                if token is not None:
                    processes.end_all(lambda: leftovers(token), grace=2.0)
        yield token
    finally:
        ray.shutdown()
        if token is not None:
            os.environ.pop(MARKER, None)
            processes.end_all(lambda: leftovers(token), grace=2.0)


def add_ray_options(parser, default_workers: int = 2):
    """The Ray options of the two Ray Train scripts: ``--workers --cpus --max-failures --address
    --run-name``."""
    from hvdcourse.examples.cli import positive_int

    parser.add_argument(
        "--workers",
        type=positive_int,
        default=default_workers,
        help="Ray Train workers (default 2)",
    )
    parser.add_argument(
        "--cpus",
        type=positive_int,
        default=None,
        help="CPUs of the local Ray instance (default: one per worker)",
    )
    parser.add_argument(
        "--max-failures",
        type=int,
        default=0,
        help="restart the workers from the last checkpoint this many times when one dies "
        "(default 0; -1: without limit)",
    )
    parser.add_argument(
        "--address",
        default=None,
        help="join this running Ray cluster ('auto' or HOST:PORT) instead of starting one",
    )
    parser.add_argument(
        "--run-name",
        default=None,
        help="Ray's name of the run (default: a new one each time; a name Ray has seen resumes it)",
    )
    return parser


def run_config(args, prefix: str):
    """Ray's RunConfig: a fresh run folder under ``--checkpoint-dir``, the failure policy."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig

    name = args.run_name or f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    return RunConfig(
        name=name,  # a run with an existing name silently resumes that run
        storage_path=os.path.abspath(args.checkpoint_dir),  # every node must see it
        failure_config=FailureConfig(max_failures=args.max_failures),  # restarts allowed
        # every epoch's checkpoint stays: its metrics are the run's history (a few hundred KB each)
        checkpoint_config=CheckpointConfig(num_to_keep=None),
    )


def latest_checkpoint(storage: str, prefix: str):
    """The newest Ray checkpoint of an earlier run of this script under ``storage``, or ``None``."""
    from ray.train import Checkpoint

    if not os.path.isdir(storage):
        return None
    found = [
        os.path.join(storage, run, name)
        for run in os.listdir(storage)
        if run.startswith(prefix) and os.path.isdir(os.path.join(storage, run))
        for name in os.listdir(os.path.join(storage, run))
        if name.startswith("checkpoint_")
    ]
    return Checkpoint.from_directory(max(found, key=os.path.getmtime)) if found else None


def final_record(result, workers: int, seconds: float, max_failures: int) -> dict:
    """The run's final metrics (what rank 0 reported last) plus Ray's view of the run: ``history``
    (every checkpointed report: epoch, loss, time) and ``wall_seconds`` of ``fit``."""
    import ray

    from hvdcourse.runtime.errors import RunFailed

    if result.error is not None or not result.metrics or not result.metrics.get("final"):
        raise RunFailed(
            f"Ray Train ended without final metrics ({result.error or 'no final report'}); "
            "see the workers' lines above"
        )
    history = []
    if result.metrics_dataframe is not None:
        history = [
            {k: v for k, v in row.items() if k in HISTORY_KEYS and v == v}  # NaN: not reported
            for row in result.metrics_dataframe.to_dict("records")
        ]
    metrics = {k: v for k, v in result.metrics.items() if k != "final"}
    return {
        **metrics,
        "ray": ray.__version__,
        "max_failures": max_failures,
        "wall_seconds": round(seconds, 2),
        "history": history,
        "checkpoint": result.checkpoint.path if result.checkpoint else None,
    }


HISTORY_KEYS = ("epoch", "train_loss", "start_epoch", "time", "final", "accuracy")
