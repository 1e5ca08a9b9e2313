"""hvdcourse.course.bench.results: efficiency and the targets are computed as the issue defines them."""

from hvdcourse.course.bench.results import (
    baseline_rate,
    framework_ratios,
    framework_table,
    framework_targets,
    scaling_efficiency,
    targets,
)


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


def framework_rows():
    return [
        row("keras-1core", 1000, "keras", 1),
        row("torch-1core", 500, "torch", 1),
        row("hvd-1rank", 950, ranks=1),
        row("torch-hvd-1rank", 480, "torch-hvd", 1),
        row("ddp-1rank", 490, "ddp", 1),
        row("hvd-2ranks-gloo", 1500),
        row("hvd-2ranks-mpi", 1800),
        row("torch-hvd-2ranks-gloo", 864, "torch-hvd"),
        row("torch-hvd-2ranks-mpi", 900, "torch-hvd"),
        row("ddp-2ranks", 882, "ddp"),
    ]


def test_framework_ratios_compare_pytorch_horovod_with_ddp_and_each_2_ranks_with_its_1_rank():
    ratios = {r["detail"]: r["value"] for r in framework_ratios(framework_rows())}
    assert ratios["PyTorch+Horovod (Gloo) / DDP, 2 ranks"] == 864 / 882
    assert ratios["PyTorch+Horovod (MPI) / DDP, 2 ranks"] == 900 / 882
    assert ratios["PyTorch+Horovod (Gloo), 2 ranks / (2 x 1 rank)"] == 0.9
    assert ratios["DDP (Gloo), 2 ranks / (2 x 1 rank)"] == 0.9
    assert ratios["Keras+Horovod (MPI), 2 ranks / (2 x 1 rank)"] == 1800 / 1900
    assert ratios["PyTorch / Keras, Horovod (Gloo) 2 ranks"] == 864 / 1500


def test_a_missing_run_leaves_its_ratios_unmeasured():
    rows = [r for r in framework_rows() if r["label"] != "ddp-2ranks"]
    status = framework_targets(framework_ratios(rows))
    assert [t["met"] for t in status] == [None, None]


def test_framework_target_is_met_only_at_ddps_throughput_or_above():
    status = {t["detail"]: t["met"] for t in framework_targets(framework_ratios(framework_rows()))}
    assert status == {
        "PyTorch+Horovod (Gloo) / DDP, 2 ranks": False,
        "PyTorch+Horovod (MPI) / DDP, 2 ranks": True,
    }


def test_framework_table_gives_2_rank_runs_their_efficiency_against_their_own_1_rank_run():
    table = framework_table(framework_rows()).set_index("run")
    assert table.loc["ddp-2ranks", "efficiency vs 1 rank"] == 0.9
    assert table.loc["torch-hvd-2ranks-gloo", "framework"] == "PyTorch + Horovod"
    assert table["efficiency vs 1 rank"].isna().to_dict() == {
        r["label"]: r["ranks"] == 1 for r in framework_rows()
    }
