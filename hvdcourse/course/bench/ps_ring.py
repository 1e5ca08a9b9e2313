"""Parameter server against ring, measured, and the alpha-beta model fitted to the times (lesson:
Parameter servers and ring-allreduce).

``python -m hvdcourse.course.bench.suite --only ps_ring`` (part of ``make bench``) times, on 2, 3 and
4 ranks of one MPI job and over message sizes of 4 KiB to 16 MiB, in the same processes:

* ``ps``: one synchronous parameter-server step
  (:func:`hvdcourse.course.lessons.parameter_server.parameter_server_allreduce`), rank 0 the server,
  the N - 1 other ranks its workers;
* ``ring``: the course's ring allreduce (:func:`hvdcourse.course.lessons.ring.ring_allreduce`);
* ``hvd``: ``horovod.tensorflow.allreduce`` (Horovod's MPI operations under ``mpirun``).

It writes ``ps_ring.json`` with the machine, the date, the load average before each launch, the ranks,
sizes and repeats. :func:`fits` fits the lesson's alpha-beta models to the record (least squares per
algorithm, :func:`hvdcourse.course.lessons.ring.fit_alpha_beta`); :func:`plot` draws both.
"""

from __future__ import annotations

import sys

from hvdcourse.course.bench.allreduce import KIB, message_sizes
from hvdcourse.course.lessons import ring
from hvdcourse.runtime import machine

RANKS = (2, 3, 4)
IMPLS = ("ps", "ring", "hvd")
MIN_BYTES, MAX_BYTES = 4 * KIB, 16 * KIB * KIB
REPEATS = 5
# a waiting rank yields its core (3 and 4 ranks share 2 cores here); Horovod looks for ready tensors
# every 0.1 ms instead of 1 ms, so that its cycle does not hide the small messages' latency
ENV = {"OMPI_MCA_mpi_yield_when_idle": "1", "HOROVOD_CYCLE_TIME": "0.1"}
QUICK = {"ranks": (2,), "impls": ("ps", "ring"), "max_bytes": 16 * KIB, "repeats": 2}

# the cost model each algorithm is fitted with: seconds for n bytes on N ranks
MODELS = {
    # one server, N - 1 workers: push then pull through the server's link, 2(N-1)(alpha + n beta)
    "ps": lambda n, ranks, alpha, beta: ring.parameter_server_time(n, ranks - 1, alpha, beta),
    "ring": ring.ring_time,
    # the ring's model (Open MPI may choose another algorithm by size: the fit shows how well it holds)
    "hvd": ring.ring_time,
}
NAMES = {"ps": "parameter server (mpi4py)", "ring": "ring (mpi4py)", "hvd": "hvd.allreduce (MPI)"}


def program(impls, max_bytes: int, repeats: int) -> list:
    args = [a for impl in impls for a in ("--impl", impl)]
    return [
        sys.executable,
        "-m",
        "hvdcourse.course.bench.allreduce",
        *args,
        "--min-bytes",
        str(MIN_BYTES),
        "--max-bytes",
        str(max_bytes),
        "--repeats",
        str(repeats),
    ]


def measure(quick: bool = False, timeout: float = 300, log=print) -> dict:
    """Launch the timings on each number of ranks; the record's body (the suite adds the machine)."""
    from hvdcourse.runtime.launch import run_ranks

    ranks = QUICK["ranks"] if quick else RANKS
    impls = QUICK["impls"] if quick else IMPLS
    max_bytes = QUICK["max_bytes"] if quick else MAX_BYTES
    repeats = QUICK["repeats"] if quick else REPEATS
    results = []
    for np_ in ranks:
        load_before = machine.load_average()
        run = run_ranks(
            program(impls, max_bytes, repeats), np=np_, launcher="mpirun", timeout=timeout, env=ENV
        )
        found = run.results[0] or []  # rank 0 reports one document per implementation
        if not (run.ok and found):
            tail = run.output.strip().splitlines()[-5:]
            log(f"  ! ps_ring on {np_} ranks failed: " + " | ".join(tail))
            results.append(
                {"ranks": np_, "error": "timed out" if run.timed_out else "failed", "tail": tail}
            )
            continue
        for doc in found:
            doc.update({"load_average_before": load_before, "wall_seconds": round(run.seconds, 1)})
            results.append(doc)
            big = doc["rows"][-1]
            log(
                f"  {np_} ranks {doc['impl']:5s} {big['bytes'] / 2**20:6.2f} MiB: "
                f"{big['seconds'] * 1e3:8.2f} ms (correct: {doc['correct']}, load {load_before[0]})"
            )
    return {
        "ranks": list(ranks),
        "impls": list(impls),
        "sizes": message_sizes(MIN_BYTES, max_bytes),
        "repeats": repeats,
        "launcher": "mpirun",
        "env": ENV,
        "server": "rank 0 (ps: the other ranks are its workers)",
        "results": results,
    }


def points(record: dict, impl: str) -> tuple:
    """(bytes, ranks, seconds) of every measurement of ``impl`` in ``record``."""
    rows = [
        (row["bytes"], doc["ranks"], row["seconds"])
        for doc in record["results"]
        if doc.get("impl") == impl
        for row in doc["rows"]
    ]
    return tuple(map(list, zip(*rows))) if rows else ([], [], [])


def fits(record: dict) -> dict:
    """{impl: alpha, beta, median_relative_error} of each algorithm's model fitted to its times."""
    out = {}
    for impl in record["impls"]:
        n_bytes, ranks, seconds = points(record, impl)
        out[impl] = ring.fit_alpha_beta(MODELS[impl], n_bytes, ranks, seconds)
    return out


def describe(record: dict) -> str:
    """Where and when the record was measured, for the figure's reading: machine, date, load."""
    m = record["machine"]
    loads = [doc["load_average_before"][0] for doc in record["results"] if "rows" in doc]
    return (
        f"{m['cpu_model']}, {m['logical_cores']} cores, {m['date'][:10]}, "
        f"1-minute load average {min(loads):.1f}-{max(loads):.1f} during the runs"
    )


def plot(record: dict, fitted: dict | None = None):
    """One panel per number of ranks: measured times (points) and the fitted model (lines)."""
    import matplotlib.pyplot as plt
    import numpy as np

    fitted = fitted or fits(record)
    fig, axes = plt.subplots(1, len(record["ranks"]), figsize=(11, 3.6), sharey=True, squeeze=False)
    sizes = np.logspace(np.log10(record["sizes"][0]), np.log10(record["sizes"][-1]), 50)
    for ax, np_ in zip(axes[0], record["ranks"]):
        for impl, color in zip(record["impls"], ("#c0392b", "#1e8449", "#2471a3")):
            docs = [d for d in record["results"] if d.get("impl") == impl and d["ranks"] == np_]
            if not docs:
                continue
            n_bytes = [row["bytes"] for row in docs[0]["rows"]]
            ax.loglog(n_bytes, [row["seconds"] for row in docs[0]["rows"]], "o", color=color, ms=4)
            f = fitted[impl]
            model = [MODELS[impl](n, np_, f["alpha"], f["beta"]) for n in sizes]
            ax.loglog(sizes, model, "-", color=color, lw=1.2, label=NAMES[impl])
        ax.set(title=f"{np_} ranks", xlabel="message size n (bytes)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("seconds per allreduce")
    axes[0][0].legend(fontsize=8, title="points: measured; lines: fit", title_fontsize=8)
    fig.tight_layout()
    return fig
