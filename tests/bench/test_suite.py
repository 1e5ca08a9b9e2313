"""hvdcourse.course.bench.suite: one command writes every result file, with the machine (tiny settings)."""

import json
import os

import pytest

from conftest import ROOT
from hvdcourse.course.bench.suite import (
    PARTS,
    QUICK,
    Config,
    combine_launches,
    concurrent_memcopy,
    framework_configs,
    ladder_configs,
    main_configs,
    run_suite,
    sweep_configs,
)


def test_equal_configurations_share_one_run():
    assert Config("a", note="x").key() == Config("b", note="y").key()
    assert Config("a").key() != Config("a", env={"HOROVOD_CYCLE_TIME": "5"}).key()


def test_main_comparison_uses_one_model_data_and_batch_for_all():
    configs = main_configs()
    assert {c.label for c in configs} == {
        "keras-1core",
        "keras-2cores",
        "hvd-1rank",
        "hvd-2ranks-gloo",
        "hvd-2ranks-mpi",
        "mwms-2workers",
        "keras-2x1core-solo",
    }
    assert len({(c.batch, c.data) for c in configs}) == 1


def test_baseline_is_pinned_to_one_core_with_one_thread():
    (base,) = [c for c in main_configs() if c.label == "keras-1core"]
    assert base.taskset == "0" and base.threads == 1


def test_pytorch_runs_use_the_model_data_batch_and_knobs_of_the_keras_runs_beside_them():
    configs = {c.label: c for c in framework_configs()}
    assert len({(c.batch, c.data) for c in configs.values()}) == 1
    for torch_label, keras_label in [
        ("torch-hvd-1rank", "hvd-1rank"),
        ("torch-hvd-2ranks-gloo", "hvd-2ranks-gloo"),
        ("torch-hvd-2ranks-mpi", "hvd-2ranks-mpi"),
        ("torch-1core", "keras-1core"),
    ]:
        torch_run, keras_run = configs[torch_label], configs[keras_label]
        assert torch_run.key()[1:] == keras_run.key()[1:]  # all but the mode
    assert (configs["ddp-2ranks"].launcher, configs["ddp-2ranks"].ranks) == ("torchrun", 2)
    assert configs["ddp-2ranks"].threads == 1 and configs["ddp-2ranks"].bind == "core"


def test_ladder_ends_at_the_tuned_configuration():
    tuned = [c for c in main_configs() if c.label == "hvd-2ranks-mpi"][0]
    assert ladder_configs()[-1].key() == tuned.key()
    assert set(sweep_configs()) >= {
        "threads",
        "cycle_time_ms",
        "fusion_threshold",
        "groups",
        "transport",
        "batch",
    }


@pytest.fixture(scope="module")
def quick_suite(tmp_path_factory):
    """The quick suite, run as two calls into one folder: every part but ``frameworks``, then
    ``frameworks`` alone (what the second call writes, and the first call's files as they were
    before it). One set of runs for every test below, the part-by-part test included."""
    out = str(tmp_path_factory.mktemp("bench"))
    quiet = lambda *a: None  # noqa: E731
    docs = run_suite(
        out, parts=tuple(p for p in PARTS if p != "frameworks"), settings=QUICK, log=quiet
    )
    before = {name: open(os.path.join(out, name)).read() for name in sorted(os.listdir(out))}
    second = run_suite(out, parts=("frameworks",), settings=QUICK, log=quiet)
    return out, {**docs, **second}, {"before": before, "second": second}


def test_quick_suite_writes_every_file_with_the_machine(quick_suite):
    out, _, _ = quick_suite
    for name in ("throughput", "tuning", "allreduce", "monitor", "frameworks", "ps_ring"):
        with open(os.path.join(out, f"{name}.json")) as fh:
            doc = json.load(fh)
        assert doc["machine"]["logical_cores"] >= 1 and "load_average_1_5_15min" in doc["machine"]


def test_quick_suite_writes_the_parameter_server_record_as_lesson_03_reads_it(quick_suite):
    _, docs, _ = quick_suite
    with open(os.path.join(ROOT, "book", "data", "bench", "ps_ring.json")) as fh:
        recorded = json.load(fh)
    assert set(docs["ps_ring"]) == set(recorded)  # the committed record has what the code writes
    assert all(d["correct"] for d in docs["ps_ring"]["results"])
    assert {d["impl"] for d in docs["ps_ring"]["results"]} == {"ps", "ring"}


def test_quick_suite_measures_every_main_run_it_lists(quick_suite):
    _, docs, _ = quick_suite
    rows = docs["throughput"]["results"]
    assert all("median_images_per_s" in r for r in rows), [r.get("output_tail") for r in rows]
    assert {t["target"] for t in docs["throughput"]["targets"]} == {
        "efficiency_2_ranks",
        "hvd_1_rank_vs_keras",
        "hvd_vs_mwms",
        "allreduce_64mb_vs_memcopy",
    }


def test_quick_suite_measures_pytorch_beside_keras_and_writes_the_ratios(quick_suite):
    _, docs, _ = quick_suite
    rows = docs["frameworks"]["results"]
    assert {r["label"] for r in rows} == {
        "hvd-2ranks-mpi",
        "torch-hvd-1rank",
        "torch-hvd-2ranks-gloo",
        "ddp-1rank",
        "ddp-2ranks",
    }
    assert all("median_images_per_s" in r for r in rows), [r.get("output_tail") for r in rows]
    measured = {r["detail"] for r in docs["frameworks"]["ratios"] if r["value"] is not None}
    assert {
        "PyTorch+Horovod (Gloo) / DDP, 2 ranks",
        "PyTorch+Horovod (Gloo), 2 ranks / (2 x 1 rank)",
        "DDP (Gloo), 2 ranks / (2 x 1 rank)",
    } <= measured
    (target,) = [t for t in docs["frameworks"]["targets"] if t["measured"] is not None]
    assert target["target"] == "torch_hvd_vs_ddp" and target["met"] in (True, False)


def test_launches_combine_into_the_median_of_their_medians_per_batch_size():
    def launch(*medians):
        return [
            {
                "batch": b,
                "median_images_per_s": m,
                "images_per_s": [m],
                "seconds": [1.0],
                "load_average_before": 0.5,
            }
            for b, m in zip((8, 16), medians)
        ]

    failed = [{"batch": 8, "error": "timeout"}, {"batch": 16, "error": "timeout"}]
    rows = combine_launches([launch(100, 10), launch(300, 30), failed, launch(200, 20)])
    assert [r["median_images_per_s"] for r in rows] == [200, 20]
    assert rows[0]["launch_medians"] == [100, 300, 200] and rows[0]["failed_launches"] == 1
    assert rows[1]["images_per_s"] == [10, 30, 20]
    assert rows[1]["load_average_before_each_launch"] == [0.5, 0.5, 0.5]
    # a batch size that failed in every launch keeps the failure as its row
    assert combine_launches([failed[:1], failed[:1]]) == [failed[0]]


def test_only_one_part_leaves_the_other_files_alone(quick_suite):
    out, _, calls = quick_suite
    assert sorted(calls["second"]) == ["frameworks"]
    assert sorted(os.listdir(out)) == sorted([*calls["before"], "frameworks.json"])
    for name, text in calls["before"].items():
        assert open(os.path.join(out, name)).read() == text, (
            f"{name} changed by the frameworks part"
        )


def test_quick_suite_records_a_cpu_trace(quick_suite):
    _, docs, _ = quick_suite
    traces = [t for t in docs["monitor"]["runs"].values() if t]
    assert traces and {"t", "cpu_percent", "memory_used_gib", "ctx_switches_per_s"} <= set(
        traces[0][0]
    )


def test_memory_copy_on_both_cores_gives_one_bandwidth_per_rank():
    doc = concurrent_memcopy(QUICK)
    assert len(doc["per_core_bytes_per_second"]) == 2 and all(
        b > 0 for b in doc["per_core_bytes_per_second"]
    )
