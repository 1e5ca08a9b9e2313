"""hvdcourse.course.bench.plots: every plot of the lesson draws from result documents shaped like the suite's."""

import matplotlib

matplotlib.use("Agg")

from hvdcourse.course.bench import plots  # noqa: E402


def row(label, rate, mode="hvd", ranks=2, batch=64, data="memory"):
    return {
        "label": label,
        "mode": mode,
        "ranks": ranks,
        "batch_per_rank": batch,
        "data": data,
        "median_images_per_s": rate,
        "images_per_s": [rate * 0.9, rate, rate * 1.1],
    }


MAIN = {"results": [row("keras-1core", 1000, "keras", 1), row("hvd-2ranks-gloo", 1900)]}
TUNING = {
    "ladder": [row("naive", 1200, batch=32), row("+batch 64", 1900)],
    "sweeps": {
        "baselines": [
            row("keras-1core", 1000, "keras", 1),
            row("keras-1core", 800, "keras", 1, 32),
        ],
        "batch": [row("keras-1core batch sweep", 800 + b, "keras", 1, b) for b in (16, 32, 64)]
        + [row("hvd-2ranks batch sweep", 1500 + b, batch=b) for b in (16, 32, 64)],
    },
}


def test_throughput_bars_draw_one_bar_per_run_and_the_ideal_line():
    fig = plots.throughput_bars(MAIN)
    ax = fig.axes[0]
    assert len(ax.patches) == 2 and len(ax.lines) >= 2


def test_ladder_labels_each_step_with_its_efficiency():
    fig = plots.ladder(TUNING)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["75%", "95%"]


def test_batch_sweep_draws_weak_and_strong_scaling():
    fig = plots.batch_sweep(TUNING)
    labels = [line.get_label() for line in fig.axes[1].lines]
    assert any("weak" in lbl for lbl in labels) and any("strong" in lbl for lbl in labels)


def test_allreduce_plot_has_one_curve_per_implementation_and_the_bound():
    doc = {
        "memcopy": {"bytes_per_second": 1e10},
        "results": [
            {
                "label": name,
                "ranks": 2,
                "rows": [
                    {"bytes": 4096, "bus_bytes_per_second": 1e8},
                    {"bytes": 16384, "bus_bytes_per_second": 1e9},
                ],
            }
            for name in ("hvd-gloo", "ring")
        ],
    }
    labels = [line.get_label() for line in plots.allreduce_bandwidth(doc).axes[0].lines]
    assert (
        "hvd-gloo" in labels
        and "ring" in labels
        and any(lbl.startswith("memory copy") for lbl in labels)
    )


def test_monitor_plot_draws_cpu_and_context_switches_per_run():
    samples = [
        {
            "t": 0.25 * i,
            "cpu_percent": [50.0, 60.0],
            "memory_used_gib": 1.0,
            "ctx_switches_per_s": 100.0,
        }
        for i in range(4)
    ]
    fig = plots.monitor_traces({"runs": {"naive": samples, "tuned": samples}})
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]


def test_frameworks_bars_draw_1_and_2_ranks_per_framework_with_the_efficiency():
    doc = {
        "results": [
            row("hvd-1rank", 1000, ranks=1),
            row("hvd-2ranks-gloo", 1800),
            row("hvd-2ranks-mpi", 1900),
            row("torch-hvd-1rank", 500, "torch-hvd", 1),
            row("torch-hvd-2ranks-gloo", 800, "torch-hvd"),
            row("ddp-1rank", 500, "ddp", 1),
            row("ddp-2ranks", 850, "ddp"),
        ]
    }
    ax = plots.frameworks_bars(doc).axes[0]
    # torch-hvd-2ranks-mpi is missing: its group is left out
    assert len(ax.patches) == 2 * 4
    assert [t.get_text() for t in ax.texts] == ["90%", "95%", "80%", "85%"]
