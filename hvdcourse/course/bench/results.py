"""Reading the benchmark results back: speedup, scaling efficiency, targets (lesson: Measuring performance).

Definitions used throughout the course:

* **throughput**: images processed per second by all ranks together (median of the timed repeats);
* **speedup** on N ranks: throughput on N ranks / throughput of the 1-process baseline;
* **scaling efficiency**: speedup / N. Here the baseline is plain Keras *pinned to one core with one
  thread*: on a 2-core machine, 2 ranks can at best do twice what one core does.
"""

from __future__ import annotations

import json
import os

from hvdcourse.runtime.paths import BOOK_DATA

RESULTS_DIR = os.path.join(BOOK_DATA, "bench")  # where `make bench` writes, the lesson reads
FILES = (
    "throughput",
    "tuning",
    "allreduce",
    "monitor",
    "frameworks",
    "ray",
    "ray_models",
    "ps_ring",
    "slurm_scaling",
)
TARGETS = {
    "efficiency_2_ranks": 0.90,  # Horovod 2 ranks >= 90% of 2 x plain Keras on one core
    "hvd_1_rank_vs_keras": 0.97,  # Horovod 1 rank within 3% of plain Keras
    "hvd_vs_mwms": 1.0,  # Horovod 2 ranks at least as fast as MWMS 2 workers
    "allreduce_64mb_vs_memcopy": 0.5,  # hvd.allreduce at 64 MB >= 50% of the memory-copy bound
    "torch_hvd_vs_ddp": 1.0,  # PyTorch + Horovod 2 ranks at least as fast as DDP 2 ranks
}
# The ratios of the frameworks comparison: (name, numerator run, denominator run, ranks of the
# numerator per rank of the denominator (2: scaling efficiency 2 ranks vs 1), what it says).
FRAMEWORK_RATIOS = (
    (
        "torch_hvd_vs_ddp",
        "torch-hvd-2ranks-gloo",
        "ddp-2ranks",
        1,
        "PyTorch+Horovod (Gloo) / DDP, 2 ranks",
    ),
    (
        "torch_hvd_vs_ddp",
        "torch-hvd-2ranks-mpi",
        "ddp-2ranks",
        1,
        "PyTorch+Horovod (MPI) / DDP, 2 ranks",
    ),
    ("torch_hvd_vs_ddp_1rank", "torch-hvd-1rank", "ddp-1rank", 1, "PyTorch+Horovod / DDP, 1 rank"),
    (
        "efficiency_2_vs_1",
        "hvd-2ranks-gloo",
        "hvd-1rank",
        2,
        "Keras+Horovod (Gloo), 2 ranks / (2 x 1 rank)",
    ),
    (
        "efficiency_2_vs_1",
        "hvd-2ranks-mpi",
        "hvd-1rank",
        2,
        "Keras+Horovod (MPI), 2 ranks / (2 x 1 rank)",
    ),
    (
        "efficiency_2_vs_1",
        "torch-hvd-2ranks-gloo",
        "torch-hvd-1rank",
        2,
        "PyTorch+Horovod (Gloo), 2 ranks / (2 x 1 rank)",
    ),
    (
        "efficiency_2_vs_1",
        "torch-hvd-2ranks-mpi",
        "torch-hvd-1rank",
        2,
        "PyTorch+Horovod (MPI), 2 ranks / (2 x 1 rank)",
    ),
    ("efficiency_2_vs_1", "ddp-2ranks", "ddp-1rank", 2, "DDP (Gloo), 2 ranks / (2 x 1 rank)"),
    ("torch_vs_keras", "torch-1core", "keras-1core", 1, "plain PyTorch / plain Keras, 1 core"),
    (
        "torch_vs_keras",
        "torch-hvd-2ranks-gloo",
        "hvd-2ranks-gloo",
        1,
        "PyTorch / Keras, Horovod (Gloo) 2 ranks",
    ),
    (
        "torch_vs_keras",
        "torch-hvd-2ranks-mpi",
        "hvd-2ranks-mpi",
        1,
        "PyTorch / Keras, Horovod (MPI) 2 ranks",
    ),
    ("hvd_1_rank_vs_plain", "hvd-1rank", "keras-1core", 1, "Keras: Horovod 1 rank / plain, 1 core"),
    (
        "hvd_1_rank_vs_plain",
        "torch-hvd-1rank",
        "torch-1core",
        1,
        "PyTorch: Horovod 1 rank / plain, 1 core",
    ),
)


def load(directory: str = RESULTS_DIR) -> dict:
    """{name: document} for the result files present in ``directory`` (throughput.json, ...)."""
    docs = {}
    for name in FILES:
        path = os.path.join(directory, f"{name}.json")
        if os.path.isfile(path):
            with open(path) as fh:
                docs[name] = json.load(fh)
    return docs


def speedup(rate: float, baseline: float) -> float:
    return rate / baseline


def scaling_efficiency(rate: float, baseline: float, ranks: int) -> float:
    """(images/s on ``ranks`` ranks) / (``ranks`` x images/s of the one-core baseline)."""
    return rate / (ranks * baseline)


def rate(rows: list, label: str, batch: int | None = None) -> float | None:
    """Median images/s of the run ``label`` (at per-rank ``batch`` if given), or None if absent/failed."""
    for row in rows:
        if row.get("label") == label and "median_images_per_s" in row:
            if batch is None or row.get("batch_per_rank") == batch:
                return row["median_images_per_s"]
    return None


def row_for(rows: list, label: str) -> dict | None:
    return next((r for r in rows if r.get("label") == label), None)


def bandwidth_at(doc: dict, label: str, nbytes: int) -> float | None:
    for result in doc.get("results", []):
        if result.get("label") == label:
            for row in result.get("rows", []):
                if row["bytes"] == nbytes:
                    return row["bus_bytes_per_second"]
    return None


def targets(throughput: dict | None, allreduce: dict | None) -> list:
    """Where each of the issue's four targets stands, as rows {target, measured, needed, met, detail}."""
    out = []
    rows = (throughput or {}).get("results", [])
    one_core = rate(rows, "keras-1core")
    hvd1 = rate(rows, "hvd-1rank")
    two = {name: rate(rows, f"hvd-2ranks-{name}") for name in ("gloo", "mpi")}
    mwms = rate(rows, "mwms-2workers")
    solo = rate(rows, "keras-2x1core-solo")

    def add(name, value, detail):
        needed = TARGETS[name]
        out.append(
            {
                "target": name,
                "measured": value,
                "needed": needed,
                "met": None if value is None else value >= needed,
                "detail": detail,
            }
        )

    for name, value in two.items():
        eff = scaling_efficiency(value, one_core, 2) if value and one_core else None
        ceiling = (
            f"; no-communication ceiling {scaling_efficiency(solo, one_core, 2):.3f}"
            if solo and one_core
            else ""
        )
        add(
            "efficiency_2_ranks",
            eff,
            f"Horovod 2 ranks ({name}) / (2 x plain Keras on 1 core){ceiling}",
        )
    add(
        "hvd_1_rank_vs_keras",
        hvd1 / one_core if hvd1 and one_core else None,
        "Horovod 1 rank / plain Keras (both on 1 core, 1 thread)",
    )
    for name, value in two.items():
        add(
            "hvd_vs_mwms",
            value / mwms if value and mwms else None,
            f"Horovod 2 ranks ({name}) / MultiWorkerMirroredStrategy 2 workers",
        )
    if allreduce:
        bound = allreduce.get("memcopy", {}).get("bytes_per_second")
        for name in ("hvd-gloo", "hvd-mpi"):
            bw = bandwidth_at(allreduce, name, 64 * 2**20)
            add(
                "allreduce_64mb_vs_memcopy",
                bw / bound if bw and bound else None,
                f"{name} bus bandwidth at 64 MB / numpy memory-copy bandwidth",
            )
    return out


def format_targets(rows: list) -> str:
    lines = []
    for row in rows:
        value = "n/a" if row["measured"] is None else f"{row['measured']:.3f}"
        verdict = {True: "MET", False: "NOT MET", None: "NOT MEASURED"}[row["met"]]
        lines.append(f"  {verdict:12s} {value:>7s} (needs >= {row['needed']:.2f})  {row['detail']}")
    return "\n".join(lines)


def throughput_table(rows: list, baseline_label: str = "keras-1core"):
    """A pandas table of throughput runs with speedup and efficiency against the one-core baseline
    at the same per-rank batch and data; efficiency is per core used (ranks x threads, at most all)."""
    import pandas as pd

    records = []
    for row in rows:
        if "median_images_per_s" not in row:
            records.append({"run": row.get("label"), "error": row.get("error", "failed")})
            continue
        base = baseline_rate(rows, row, baseline_label)
        rates = row["images_per_s"]
        records.append(
            {
                "run": row["label"],
                "ranks": row["ranks"],
                "batch/rank": row["batch_per_rank"],
                "images/s": round(row["median_images_per_s"]),
                "min-max": f"{min(rates):.0f}-{max(rates):.0f}",
                "speedup": round(speedup(row["median_images_per_s"], base), 2) if base else None,
                "cores": row.get("cores_used", row["ranks"]),
                "efficiency": round(
                    scaling_efficiency(
                        row["median_images_per_s"], base, row.get("cores_used", row["ranks"])
                    ),
                    3,
                )
                if base
                else None,
                "load": row.get("load_average_before", [None])[0],
            }
        )
    return pd.DataFrame.from_records(records)


def tuning_rows(tuning: dict) -> list:
    """All rows of a tuning document, the baselines first (so :func:`baseline_rate` prefers them)."""
    sweeps = tuning.get("sweeps", {})
    rows = list(sweeps.get("baselines", []))
    for name, group in sweeps.items():
        if name != "baselines":
            rows += group
    return rows + list(tuning.get("ladder", []))


def baseline_rate(rows: list, row: dict, baseline_label: str = "keras-1core") -> float | None:
    """The one-core plain-Keras rate with the same per-rank batch and data pipeline as ``row``."""
    for other in rows:
        if (
            other.get("label", "").startswith(baseline_label)
            and other.get("mode") == "keras"
            and other.get("batch_per_rank") == row.get("batch_per_rank")
            and other.get("data") == row.get("data")
            and "median_images_per_s" in other
        ):
            return other["median_images_per_s"]
    return None


def efficiency_table(rows: list, pool: list | None = None):
    """Like :func:`throughput_table` but the baselines are looked up in ``pool`` (default: ``rows``)."""
    import pandas as pd

    pool = rows if pool is None else pool
    records = []
    for row in rows:
        if "median_images_per_s" not in row:
            records.append({"run": row.get("label"), "error": row.get("error", "failed")})
            continue
        base = baseline_rate(pool, row)
        value = row["median_images_per_s"]
        records.append(
            {
                "run": row["label"],
                "batch/rank": row["batch_per_rank"],
                "images/s": round(value),
                "efficiency": round(scaling_efficiency(value, base, row["ranks"]), 3)
                if base
                else None,
                "ctx switches/s": row.get("monitor", {}).get("mean_ctx_switches_per_s"),
                "load": row.get("load_average_before", [None])[0],
                "what": row.get("note", ""),
            }
        )
    return pd.DataFrame.from_records(records)


def allreduce_table(doc: dict, sizes=(4096, 262144, 4 * 2**20, 64 * 2**20)):
    """Bus bandwidth (GB/s) per implementation at a few sizes, and the fraction of the memory-copy bound."""
    import pandas as pd

    bound = doc["memcopy"]["bytes_per_second"]
    records = []
    for result in doc["results"]:
        record = {"implementation": result["label"], "correct": result["correct"]}
        for row in result["rows"]:
            if row["bytes"] in sizes:
                name = (
                    f"{row['bytes'] // 2**20} MB"
                    if row["bytes"] >= 2**20
                    else f"{row['bytes'] // 1024} KB"
                )
                record[f"{name} (GB/s)"] = round(row["bus_bytes_per_second"] / 1e9, 3)
        big = result["rows"][-1]
        record["largest / memcopy"] = round(big["bus_bytes_per_second"] / bound, 3)
        records.append(record)
    return pd.DataFrame.from_records(records)


def ladder_table(tuning: dict):
    """The tuning ladder as before/after numbers: each step's images/s, efficiency, and change from the
    step before (the naive run first, the tuned run last)."""
    table = efficiency_table(tuning["ladder"], tuning_rows(tuning))
    if "images/s" in table:
        table.insert(
            3, "change", table["images/s"].pct_change().map(lambda x: "" if x != x else f"{x:+.0%}")
        )  # x != x: NaN for the first row
    return table[
        [
            c
            for c in (
                "run",
                "batch/rank",
                "images/s",
                "change",
                "efficiency",
                "ctx switches/s",
                "what",
            )
            if c in table
        ]
    ]


def framework_ratios(rows: list) -> list:
    """The ratios of :data:`FRAMEWORK_RATIOS` from one run's rows (all at one per-rank batch), as rows
    {ratio, numerator, denominator, value, detail}; value is None where a run is missing or failed."""
    out = []
    for name, top, bottom, per, detail in FRAMEWORK_RATIOS:
        a, b = rate(rows, top), rate(rows, bottom)
        out.append(
            {
                "ratio": name,
                "numerator": top,
                "denominator": bottom,
                "value": a / (per * b) if a and b else None,
                "detail": detail,
            }
        )
    return out


def framework_targets(ratios: list) -> list:
    """The issue's target for the frameworks comparison (PyTorch+Horovod >= DDP at 2 ranks), as the
    rows of :func:`targets`."""
    needed = TARGETS["torch_hvd_vs_ddp"]
    return [
        {
            "target": "torch_hvd_vs_ddp",
            "measured": r["value"],
            "needed": needed,
            "met": None if r["value"] is None else r["value"] >= needed,
            "detail": r["detail"],
        }
        for r in ratios
        if r["ratio"] == "torch_hvd_vs_ddp"
    ]


def format_ratios(ratios: list) -> str:
    return "\n".join(
        f"  {'n/a' if r['value'] is None else format(r['value'], '.3f'):>7s}  {r['detail']}"
        for r in ratios
    )


FRAMEWORK_NAMES = {
    "keras": "Keras",
    "hvd": "Keras + Horovod",
    "torch": "PyTorch",
    "torch-hvd": "PyTorch + Horovod",
    "ddp": "PyTorch DDP",
}


def framework_table(rows: list):
    """The frameworks comparison as a table: one row per run with its images/s and, for 2 ranks, the
    scaling efficiency against the same framework's run at 1 rank (same launcher family)."""
    import pandas as pd

    one_rank = {
        r["mode"]: r["median_images_per_s"]
        for r in rows
        if "median_images_per_s" in r
        and r.get("ranks") == 1
        and r["mode"] in ("hvd", "torch-hvd", "ddp")
    }
    records = []
    for row in rows:
        if "median_images_per_s" not in row:
            records.append({"run": row.get("label"), "error": row.get("error", "failed")})
            continue
        value, base = row["median_images_per_s"], one_rank.get(row["mode"])
        rates = row["images_per_s"]
        records.append(
            {
                "run": row["label"],
                "framework": FRAMEWORK_NAMES.get(row["mode"], row["mode"]),
                "launcher": row.get("launcher"),
                "ranks": row["ranks"],
                "batch/rank": row["batch_per_rank"],
                "images/s": round(value),
                "min-max": f"{min(rates):.0f}-{max(rates):.0f}",
                "efficiency vs 1 rank": round(scaling_efficiency(value, base, row["ranks"]), 3)
                if base and row["ranks"] > 1
                else None,
            }
        )
    return pd.DataFrame.from_records(records)
