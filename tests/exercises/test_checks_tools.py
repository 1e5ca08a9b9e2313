"""Checks of exercises 8-11 (hvdcourse/course/exercises/checks_tools.py): wrong answers get the intended findings."""

import json
from collections import defaultdict

import pytest

from hvdcourse.course.exercises import checks_tools as checks
from hvdcourse.course.grading import keys


def failed(result):
    return {f.criterion for f in result.findings if not f.passed}


def finding(result, text_start):
    return next(f for f in result.findings if f.criterion.startswith(text_start))


def phase_times(events, scale=1000.0):
    open_events, totals = defaultdict(list), defaultdict(float)
    for event in events:
        if event.get("ph") == "B":
            open_events[event["pid"]].append((event["name"], event["ts"]))
        elif event.get("ph") == "E" and open_events[event["pid"]]:
            name, start = open_events[event["pid"]].pop()
            totals[name] += (event["ts"] - start) / scale
    return dict(totals)


def test_ex08_json_load_fails_only_on_the_file_of_a_killed_run():
    def time_per_phase(path):
        return phase_times(json.load(open(path)))

    result = checks.ex08_timeline(time_per_phase, quiet=True)
    assert failed(result) == {
        "also reads the file of a killed run (no closing ']', last record cut)"
    }
    assert "JSONDecodeError" in finding(result, "also reads").detail


def test_ex08_microseconds_get_the_unit_hint():
    result = checks.ex08_timeline(
        lambda path: phase_times(json.load(open(path)), scale=1.0), quiet=True
    )
    assert "1000 times too large" in finding(result, "total time per phase").hint


def test_ex08_truncated_copy_has_no_closing_bracket():
    text = open(checks.truncated_copy(checks.paths.data_path(checks.TIMELINE_FILE), "/tmp")).read()
    assert not text.rstrip().endswith("]")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def efficiency(curve):
    return {n: ips / (n * curve[1]) for n, ips in curve.items()}


def test_ex09_speedup_instead_of_efficiency_is_named():
    result = checks.ex09_scaling(
        lambda curve: {n: ips / curve[1] for n, ips in curve.items()},
        lambda curves, floor, cap: (32, 1),
        quiet=True,
    )
    assert "that is the speedup" in finding(result, "scaling efficiency").hint


def test_ex09_ignoring_the_global_batch_limit_fails_choice_and_limits():
    def fastest_efficient(curves, min_efficiency, max_global_batch):
        ok = [
            (ips, -n, b, n)
            for b, c in curves.items()
            for n, ips in c.items()
            if efficiency(c)[n] >= min_efficiency
        ]
        return max(ok)[2:]

    result = checks.ex09_scaling(efficiency, fastest_efficient, quiet=True)
    assert failed(result) == {
        "picks the fastest setup within the efficiency floor and the global-batch limit",
        "respects both limits in every case (with at least half the cases right)",
    }
    assert "global batch" in finding(result, "respects").detail


@pytest.mark.parametrize(
    "value,minutes",
    [("30", 30), ("1:30:00", 90), ("90:00", 90), ("1-00", 1440), ("0-01:30", 90), ("bad", None)],
)
def test_slurm_time_formats_are_read_as_minutes(value, minutes):
    assert checks.slurm_minutes(value) == minutes


GOOD_SCRIPT = """#!/bin/bash
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node={tasks}
#SBATCH --time={minutes}
srun --mpi=pmix python -m hvdcourse.examples.train_hvd --epochs {epochs}
"""


def test_ex10_a_minimal_correct_script_passes():
    result = checks.ex10_slurm(
        lambda nodes, tasks, minutes, epochs: GOOD_SCRIPT.format(**locals()), quiet=True
    )
    assert result.passed


def test_ex10_sbatch_line_after_a_command_is_reported_as_ignored():
    def job_script(nodes, tasks, minutes, epochs):
        return GOOD_SCRIPT.format(**locals()).replace(
            "#SBATCH --time", "module load openmpi\n#SBATCH --time"
        )

    result = checks.ex10_slurm(job_script, quiet=True)
    assert "sbatch ignores '#SBATCH --time" in finding(result, "starts with").detail
    assert "no --time that sbatch reads" in finding(result, "asks for").detail


def test_ex10_mpirun_inside_the_job_is_refused():
    def job_script(nodes, tasks, minutes, epochs):
        return GOOD_SCRIPT.format(**locals()).replace(
            "srun --mpi=pmix", f"mpirun -np {nodes * tasks}"
        )

    assert (
        "mpirun/horovodrun"
        in finding(checks.ex10_slurm(job_script, quiet=True), "starts the ranks").detail
    )


def test_ex10_an_unset_variable_like_the_seeds_mask_is_caught_by_shellcheck():
    def job_script(nodes, tasks, minutes, epochs):
        return GOOD_SCRIPT.format(**locals()).replace(
            "srun", 'MASK="0x${fe}000"\nsrun --cpu-bind=mask_cpu:"$MASK"'
        )

    result = checks.ex10_slurm(job_script, quiet=True)
    assert failed(result) == {"is clean for shellcheck (no unset variables, quoting)"}
    assert "fe is referenced but not assigned" in finding(result, "is clean").detail


def test_ex11_empty_dict_is_not_done():
    assert checks.ex11_find_the_bug({}, quiet=True).status == "not-done"


def test_ex11_unknown_kind_is_explained():
    assert "unknown kind(s) ['typo']" in checks.ex11_find_the_bug({"typo": 3}, quiet=True).problem


def test_ex11_right_kind_on_the_wrong_line_is_not_counted():
    result = checks.ex11_find_the_bug({"unscaled-lr": 12, "undefined-name": 20}, quiet=True)
    assert result.score == 1
    assert "line [12] is not where" in finding(result, "finds 'unscaled-lr'").detail


def test_ex11_every_kind_points_at_lines_of_the_buggy_script():
    lines = checks.buggy_script_lines()
    assert set(keys.BUG_PATTERNS) == set(checks.BUG_KINDS)
    for kind in checks.BUG_KINDS:
        assert keys.bug_lines(kind), kind
        assert all(1 <= n <= len(lines) for n in keys.bug_lines(kind))


def test_ex11_the_self_checks_digests_are_the_graders_key():
    assert keys.bug_digests() == {k: sorted(v) for k, v in checks.BUG_DIGESTS.items()}


def test_ex11_the_self_check_and_the_graders_key_agree_on_every_line():
    key = {"lines": keys.bug_answers()}
    for line in range(1, len(checks.buggy_script_lines()) + 1):
        for kind in checks.BUG_KINDS:
            own = checks.ex11_find_the_bug({kind: line}, quiet=True)
            graded = checks.ex11_find_the_bug({kind: line}, quiet=True, hidden=key)
            assert [f.passed for f in own.findings] == [f.passed for f in graded.findings]
    right = {kind: lines[0] for kind, lines in keys.bug_answers().items()}
    assert checks.ex11_find_the_bug(right, quiet=True).score == len(right)


def test_ex11_the_learners_module_holds_no_line_of_the_key():
    assert all(isinstance(hint, str) for hint in checks.BUG_KINDS.values())
    assert not hasattr(checks, "bug_lines")
