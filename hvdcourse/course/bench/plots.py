"""Plots of the benchmark results (lesson: Measuring performance).

Each function takes a result document of :func:`hvdcourse.course.bench.results.load` and returns a
matplotlib Figure; none of them measures anything.
"""

from __future__ import annotations

from hvdcourse.course.bench.results import baseline_rate, scaling_efficiency, tuning_rows

GB = 1e9


def _plt():
    import matplotlib.pyplot as plt

    return plt


def throughput_bars(doc: dict):
    """images/s of the main comparison, with the ideal 2x-one-core line."""
    plt = _plt()
    rows = [r for r in doc["results"] if "median_images_per_s" in r]
    base = next((r["median_images_per_s"] for r in rows if r["label"] == "keras-1core"), None)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels = [r["label"] for r in rows]
    values = [r["median_images_per_s"] for r in rows]
    spread = [
        [v - min(r["images_per_s"]) for v, r in zip(values, rows)],
        [max(r["images_per_s"]) - v for v, r in zip(values, rows)],
    ]
    palette = {"keras": "#888888", "hvd": "#1f77b4", "mwms": "#ff7f0e", "solo": "#b5d99c"}
    colors = [palette.get(r["mode"], "#cccccc") for r in rows]
    ax.barh(labels, values, xerr=spread, color=colors, capsize=3)
    if base:
        ax.axvline(
            2 * base,
            color="green",
            linestyle="--",
            label="2 x plain Keras on 1 core (ideal for 2 ranks)",
        )
        ax.axvline(0.9 * 2 * base, color="green", linestyle=":", label="90% of that (target)")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("images/s (median of repeats; bars: min-max)")
    ax.set_title(
        f"Same model, data and batch per rank ({rows[0]['batch_per_rank']} images)" if rows else ""
    )
    fig.tight_layout()
    return fig


def ladder(tuning: dict):
    """Scaling efficiency after each cumulative tuning step."""
    plt = _plt()
    rows = tuning["ladder"]
    pool = tuning_rows(tuning)
    names, effs = [], []
    for r in rows:
        base = baseline_rate(pool, r) if "median_images_per_s" in r else None
        names.append(r["label"])
        effs.append(scaling_efficiency(r["median_images_per_s"], base, r["ranks"]) if base else 0)
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.bar(names, [100 * e for e in effs], color="#1f77b4")
    for i, e in enumerate(effs):
        ax.text(i, 100 * e + 1, f"{100 * e:.0f}%", ha="center", fontsize=9)
    ax.axhline(90, color="green", linestyle=":", label="target 90%")
    ax.set_ylabel("scaling efficiency (%)")
    ax.set_ylim(0, 110)
    ax.set_title("Horovod, 2 ranks: one change at a time")
    ax.legend(loc="lower right", fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    fig.tight_layout()
    return fig


def batch_sweep(tuning: dict):
    """Weak scaling (fixed batch per rank) and strong scaling (fixed global batch) against batch size,
    one line per 2-rank configuration of the sweep."""
    plt = _plt()
    rows = [r for r in tuning["sweeps"]["batch"] if "median_images_per_s" in r]
    keras = {
        r["batch_per_rank"]: r["median_images_per_s"] for r in rows if r.get("mode") == "keras"
    }
    series = {}
    for r in rows:
        if r.get("mode") != "keras":
            series.setdefault(r["label"], {})[r["batch_per_rank"]] = r["median_images_per_s"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    batches = sorted(keras)
    left.plot(
        batches, [keras[b] for b in batches], "o-", color="#888888", label="plain Keras, 1 core"
    )
    for label, rates in series.items():
        common = [b for b in batches if b in rates]
        (line,) = left.plot(common, [rates[b] for b in common], "o-", label=f"{label}, 2 ranks")
        weak = [100 * scaling_efficiency(rates[b], keras[b], 2) for b in common]
        right.plot(
            common, weak, "o-", color=line.get_color(), label=f"{label}: weak (same batch per rank)"
        )
        strong = [
            (b, 100 * scaling_efficiency(rates[b // 2], keras[b], 2))
            for b in batches
            if b // 2 in rates
        ]
        if strong:
            right.plot(
                [b for b, _ in strong],
                [e for _, e in strong],
                "s--",
                color=line.get_color(),
                label=f"{label}: strong (same global batch)",
            )
    left.set_xscale("log", base=2)
    left.set_xlabel("batch per rank")
    left.set_ylabel("images/s")
    left.legend(fontsize=7)
    left.set_title("Throughput")
    right.axhline(90, color="green", linestyle=":")
    right.set_xscale("log", base=2)
    right.set_xlabel("batch per rank (weak) / global batch (strong)")
    right.set_ylabel("scaling efficiency (%)")
    right.set_ylim(0, 110)
    right.legend(fontsize=7)
    right.set_title("Efficiency at 2 ranks")
    fig.tight_layout()
    return fig


def allreduce_bandwidth(doc: dict):
    """Bus bandwidth against message size for each implementation, beside the memory-copy bound."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for result in doc["results"]:
        sizes = [row["bytes"] for row in result["rows"]]
        ax.plot(
            sizes,
            [row["bus_bytes_per_second"] / GB for row in result["rows"]],
            "o-",
            label=result["label"],
        )
    bound = doc["memcopy"]["bytes_per_second"] / GB
    ax.axhline(
        bound, color="black", linestyle="--", label=f"memory copy, 1 core ({bound:.1f} GB/s)"
    )
    ax.axhline(bound / 2, color="black", linestyle=":", label="50% of it (target at 64 MB)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = [4 * 1024**1 * 4**i for i in range(0, 8)]
    ax.set_xticks(ticks, [_size(t) for t in ticks])
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(
        f"Allreduce on {doc['results'][0]['ranks'] if doc['results'] else 2} ranks, one machine"
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _size(nbytes: int) -> str:
    return f"{nbytes // 2**20} MB" if nbytes >= 2**20 else f"{nbytes // 1024} KB"


def monitor_traces(doc: dict):
    """Total CPU % and context switches/s over time, one line per monitored run."""
    plt = _plt()
    fig, (cpu, ctx) = plt.subplots(1, 2, figsize=(9, 3.2))
    for label, samples in doc["runs"].items():
        if not samples:
            continue
        t = [s["t"] for s in samples]
        cpu.plot(t, [sum(s["cpu_percent"]) for s in samples], label=label)
        ctx.plot(t, [s["ctx_switches_per_s"] for s in samples], label=label)
    cpu.set_xlabel("seconds since launch")
    cpu.set_ylabel("CPU % (100 per core)")
    cpu.set_title("CPU busy, whole machine")
    ctx.set_xlabel("seconds since launch")
    ctx.set_ylabel("context switches / s")
    ctx.set_title("Context switches, whole machine")
    cpu.legend(fontsize=8)
    fig.tight_layout()
    return fig


# (group shown, run at 1 rank, run at 2 ranks) of the frameworks comparison
FRAMEWORK_GROUPS = (
    ("Keras + Horovod\nGloo", "hvd-1rank", "hvd-2ranks-gloo"),
    ("Keras + Horovod\nMPI", "hvd-1rank", "hvd-2ranks-mpi"),
    ("PyTorch + Horovod\nGloo", "torch-hvd-1rank", "torch-hvd-2ranks-gloo"),
    ("PyTorch + Horovod\nMPI", "torch-hvd-1rank", "torch-hvd-2ranks-mpi"),
    ("PyTorch DDP\nGloo", "ddp-1rank", "ddp-2ranks"),
)


def frameworks_bars(doc: dict):
    """images/s at 1 and 2 ranks for each framework and controller of the frameworks comparison,
    the ideal (2 x its 1-rank run) marked, and each 2-rank bar labelled with its scaling efficiency."""
    from hvdcourse.course.bench.results import rate

    plt = _plt()
    rows = doc["results"]
    groups = [g for g in FRAMEWORK_GROUPS if rate(rows, g[1]) and rate(rows, g[2])]
    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    width = 0.38
    for i, (name, one, two) in enumerate(groups):
        base, value = rate(rows, one), rate(rows, two)
        color = "#1f77b4" if name.startswith("Keras") else "#d62728"
        if "DDP" in name:
            color = "#9467bd"
        ax.bar(i - width / 2, base, width, color=color, alpha=0.45)
        ax.bar(i + width / 2, value, width, color=color)
        ax.hlines(2 * base, i + 0.02, i + width + 0.02, color="green", linestyle="--")
        ax.text(
            i + width / 2,
            value,
            f"{100 * scaling_efficiency(value, base, 2):.0f}%",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], fontsize=8)
    ax.set_ylabel("images/s (median)")
    batch = next((r["batch_per_rank"] for r in rows if "batch_per_rank" in r), None)
    ax.set_title(
        f"1 rank (light) and 2 ranks (dark), {batch} images per rank; dashes: 2 x 1 rank; "
        "labels: efficiency",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def slurm_scaling(doc: dict, max_nodes: int = 8):
    """images/s and scaling efficiency against nodes, per batch, of a ``slurm_scaling`` document,
    on the ELKH Cloud talk's axis of 1-``max_nodes`` nodes, with the ideal lines."""
    plt = _plt()
    fig, (rate_ax, eff_ax) = plt.subplots(1, 2, figsize=(9, 3.4))
    nodes = list(range(1, max_nodes + 1))
    for i, batch in enumerate(sorted({r["batch_per_rank"] for r in doc["efficiency"]})):
        rows = sorted(
            (r for r in doc["efficiency"] if r["batch_per_rank"] == batch), key=lambda r: r["nodes"]
        )
        color = f"C{i}"
        xs = [r["nodes"] for r in rows]
        rate_ax.plot(
            xs, [r["images_per_s"] for r in rows], "o-", color=color, label=f"batch {batch}"
        )
        one = next((r["images_per_s"] for r in rows if r["nodes"] == 1), None)
        if one:
            rate_ax.plot(
                nodes, [n * one for n in nodes], ":", color=color, label=f"ideal, batch {batch}"
            )
        eff_ax.plot(xs, [r["efficiency"] for r in rows], "o-", color=color, label=f"batch {batch}")
    eff_ax.axhline(1.0, color="grey", linestyle=":", label="ideal")
    for ax in (rate_ax, eff_ax):
        ax.set_xlabel("nodes (one rank each)")
        ax.set_xticks(nodes)
        ax.set_xlim(0.5, max_nodes + 0.5)
        ax.legend(fontsize=8)
    rate_ax.set_ylabel("images/s (median)")
    eff_ax.set_ylabel("scaling efficiency")
    eff_ax.set_ylim(0, 1.1)
    fig.suptitle("ResNet-20, synthetic CIFAR-shaped data, local Slurm cluster", fontsize=10)
    fig.tight_layout()
    return fig
