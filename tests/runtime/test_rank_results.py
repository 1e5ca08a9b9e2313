"""hvdcourse.runtime.results: what ranks report comes back to the caller of run_ranks, per rank."""

import json
import os
import subprocess

import pytest

from conftest import PYTHON
from hvdcourse.runtime import results
from hvdcourse.runtime.launch import run_ranks

REPORT = "from hvdcourse.runtime.ranks import launcher_rank; from hvdcourse.runtime.results import report; "


@pytest.mark.parametrize("launcher", ["mpirun", "gloo", "mpi"])
def test_records_come_back_per_rank_in_rank_order(launcher):
    code = REPORT + "r = launcher_rank(); report({'rank': r, 'n': 1}); report({'rank': r, 'n': 2})"
    run = run_ranks([PYTHON, "-c", code], np=2, launcher=launcher, timeout=90)
    assert run.ok, run.output
    assert run.results == [
        [{"rank": 0, "n": 1}, {"rank": 0, "n": 2}],
        [{"rank": 1, "n": 1}, {"rank": 1, "n": 2}],
    ]


def test_a_rank_that_reports_nothing_gives_none_and_the_error_names_it():
    run = run_ranks(
        [PYTHON, "-c", REPORT + "r = launcher_rank()\nif r == 0: report({'rank': r})"],
        np=2,
        launcher="mpirun",
        timeout=60,
    )
    assert run.ok, run.output
    assert run.results == [[{"rank": 0}], None]
    assert run.rank_results(0) == [{"rank": 0}]
    with pytest.raises(RuntimeError, match=r"^rank 1 reported no result \(exit code 0\)"):
        run.rank_results(1)


def test_the_results_folder_is_gone_after_the_run():
    code = REPORT + f"import os; report({{'folder': os.environ[{results.VARIABLE!r}]}})"
    run = run_ranks([PYTHON, "-c", code], np=1, launcher="python", timeout=60)
    assert run.ok, run.output
    folder = run.results[0][0]["folder"]
    assert folder and not os.path.exists(folder)


def test_a_file_that_is_not_a_list_of_records_counts_as_nothing_reported():
    code = (
        REPORT + f"import os; r = launcher_rank(); report({{'rank': r}})\n"
        f"if r == 1: open(os.path.join(os.environ[{results.VARIABLE!r}], 'rank-1.json'), 'w').write('{{no')"
    )
    run = run_ranks([PYTHON, "-c", code], np=2, launcher="mpirun", timeout=60)
    assert run.ok, run.output
    assert run.results == [[{"rank": 0}], None]


def test_a_script_run_by_hand_writes_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != results.VARIABLE}
    proc = subprocess.run(
        [PYTHON, "-c", "from hvdcourse.runtime.results import report; print(report({'a': 1}))"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "None"
    assert os.listdir(tmp_path) == []


def test_a_record_that_is_not_json_is_refused_before_anything_is_written(tmp_path):
    environ = {results.VARIABLE: str(tmp_path), "OMPI_COMM_WORLD_RANK": "3"}
    results.report({"ok": 1}, environ)
    with pytest.raises(TypeError):
        results.report({"value": object()}, environ)
    assert os.listdir(tmp_path) == ["rank-3.json"]
    assert json.loads((tmp_path / "rank-3.json").read_text()) == [{"ok": 1}]


def test_the_runtime_reads_rank_size_and_local_rank_from_any_launcher():
    from hvdcourse.runtime import ranks

    assert ranks.launcher_rank({"OMPI_COMM_WORLD_RANK": "3"}) == 3
    assert ranks.launcher_rank({"SLURM_PROCID": "1", "PMIX_RANK": "1"}) == 1
    assert ranks.announced_rank({}) is None and ranks.launcher_rank({}) == 0
    assert ranks.launcher_size({"OMPI_COMM_WORLD_SIZE": "4"}) == 4 and ranks.launcher_size({}) == 1
    assert ranks.launcher_local_rank({"SLURM_LOCALID": "2"}) == 2
    assert ranks.launcher_local_rank({}) == 0


def test_records_of_one_kind_come_rank_by_rank_in_the_order_reported():
    code = REPORT + (
        "r = launcher_rank(); report({'kind': 'saved', 'rank': r, 'epoch': 1}); "
        "report({'kind': 'final', 'rank': r}); report({'kind': 'saved', 'rank': r, 'epoch': 2})"
    )
    run = run_ranks([PYTHON, "-c", code], np=2, launcher="mpirun", timeout=60)
    assert run.ok, run.output
    assert [(r["rank"], r["epoch"]) for r in run.records("saved")] == [
        (0, 1),
        (0, 2),
        (1, 1),
        (1, 2),
    ]
    assert run.records("final") == [{"kind": "final", "rank": 0}, {"kind": "final", "rank": 1}]
    assert run.records("restored") == []
