"""hvdcourse.course.bench.results: efficiency and the targets are computed as the issue defines them."""

from hvdcourse.course.bench.results import baseline_rate, scaling_efficiency, targets


def row(label, rate, mode="hvd", ranks=2, batch=64, data="memory"):
    return {
        "label": label,
        "mode": mode,
        "ranks": ranks,
        "batch_per_rank": batch,
        "data": data,
        "median_images_per_s": rate,
        "images_per_s": [rate],
    }


def test_efficiency_is_rate_over_ranks_times_one_core_rate():
    assert scaling_efficiency(1800, 1000, 2) == 0.9


def test_targets_report_met_and_unmet_against_the_one_core_baseline():
    doc = {
        "results": [
            row("keras-1core", 1000, "keras", 1),
            row("hvd-1rank", 980, ranks=1),
            row("hvd-2ranks-gloo", 1850),
            row("hvd-2ranks-mpi", 1700),
            row("mwms-2workers", 1750),
        ]
    }
    allreduce = {
        "memcopy": {"bytes_per_second": 10e9},
        "results": [
            {"label": "hvd-gloo", "rows": [{"bytes": 64 * 2**20, "bus_bytes_per_second": 6e9}]}
        ],
    }
    status = {(r["target"], r["detail"].split(")")[0]): r for r in targets(doc, allreduce)}
    assert "ceiling" not in status[("efficiency_2_ranks", "Horovod 2 ranks (gloo")]["detail"]
    assert status[("efficiency_2_ranks", "Horovod 2 ranks (gloo")]["met"] is True
    assert status[("efficiency_2_ranks", "Horovod 2 ranks (mpi")]["met"] is False
    assert (
        status[("hvd_1_rank_vs_keras", "Horovod 1 rank / plain Keras (both on 1 core, 1 thread")][
            "measured"
        ]
        == 0.98
    )
    assert status[("hvd_vs_mwms", "Horovod 2 ranks (mpi")]["met"] is False
    assert status[
        (
            "allreduce_64mb_vs_memcopy",
            "hvd-gloo bus bandwidth at 64 MB / numpy memory-copy bandwidth",
        )
    ]["met"]


def test_missing_runs_are_reported_as_not_measured():
    assert all(r["met"] is None for r in targets({"results": []}, None))


def test_baseline_has_the_same_batch_and_data_as_the_run():
    rows = [
        row("keras-1core", 1000, "keras", 1, batch=32),
        row("keras-1core", 1200, "keras", 1, batch=64),
        row("keras-1core pipeline", 900, "keras", 1, batch=64, data="pipeline"),
    ]
    assert baseline_rate(rows, row("x", 2000, batch=64)) == 1200
    assert baseline_rate(rows, row("x", 2000, batch=64, data="pipeline")) == 900


def test_efficiency_target_states_the_no_communication_ceiling_when_measured():
    doc = {
        "results": [
            row("keras-1core", 1000, "keras", 1),
            row("hvd-2ranks-mpi", 1700),
            row("keras-2x1core-solo", 1760, "solo"),
        ]
    }
    (eff,) = [
        r for r in targets(doc, None) if r["target"] == "efficiency_2_ranks" and r["measured"]
    ]
    assert eff["measured"] == 0.85 and "ceiling 0.880" in eff["detail"]
