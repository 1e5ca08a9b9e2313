"""A rank that crashes, is killed or hangs ends the whole run, quickly, with the rank named.

Each run injects one fault with :mod:`hvdcourse.course.lessons.faults` into a 2-rank ``train_hvd`` run and asserts
the outcome (non-zero exit, a summary line naming rank 1) and that the run ended by itself after the
fault: the time from the fault to the end is printed; the limits below only end a hung run, far
above what a busy machine takes (a crash or kill ends the run 1-5 s after the fault).
"""

import os
import subprocess
import time

import psutil
import pytest

from conftest import PYTHON, ROOT
from hvdcourse.course.lessons import faults
from hvdcourse.runtime.launch import failure_summary

QUICK = ["--epochs", "2", "--max-steps", "5", "--batch-size", "32", "--no-resume"]
# hang guards: seconds for a whole failed run (about 20-35 s on an idle machine), and from the fault
# to the end of the run (crash, kill: 1-5 s)
RUN_BOUND = 240
EXIT_BOUND = 90
# A hung rank is found by Horovod's stall check; the test shortens it (the course's default: 20 s / 60 s).
STALL = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "5", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "15"}
# shutdown after 15 s, plus the stall check period and exit (24-46 s seen on a loaded machine)
HANG_EXIT_BOUND = 150


def assert_failed_fast(run, after_fault, bound=EXIT_BOUND):
    assert not run.timed_out, run.output[-3000:]
    assert run.returncode != 0
    assert after_fault is not None, "the fault was never injected:\n" + run.output[-3000:]
    # a hang guard, not a performance target: only a run that never ended by itself reaches it
    assert after_fault < bound, f"the run took {after_fault:.1f} s to end after the fault"


@pytest.mark.parametrize("launcher", ["mpirun", "gloo", "mpi"])
@pytest.mark.parametrize("mode", ["crash", "kill"])
def test_dead_rank_ends_the_run_within_the_bound_naming_the_rank(tmp_path, launcher, mode):
    run, after_fault = faults.run_with_fault(
        [*QUICK, "--checkpoint-dir", "ckpt"],
        mode=mode,
        rank=1,
        at_step=3,
        launcher=launcher,
        timeout=RUN_BOUND,
        cwd=str(tmp_path),
    )
    assert_failed_fast(run, after_fault)
    assert run.failure.startswith("rank 1 failed first"), run.output[-3000:]
    assert "[hvdcourse] FAILED after" in run.output.splitlines()[-1]
    print(
        f"{launcher}/{mode}: exit {run.returncode} after {run.seconds:.1f} s, "
        f"{after_fault:.1f} s after the fault: {run.failure}"
    )


def test_hung_rank_is_ended_by_the_stall_check(tmp_path):
    run, after_fault = faults.run_with_fault(
        [*QUICK, "--checkpoint-dir", "ckpt"],
        mode="hang",
        rank=1,
        at_step=3,
        launcher="mpirun",
        timeout=RUN_BOUND,
        env=STALL,
        cwd=str(tmp_path),
    )
    assert_failed_fast(run, after_fault, bound=HANG_EXIT_BOUND)
    assert "Missing ranks" in run.output  # Horovod's stall report names rank 1
    assert run.failure.startswith("rank 1 failed first"), run.output[-3000:]


def test_course_sets_fault_timeouts_explicitly():
    from hvdcourse.runtime.mpienv import launch_env

    env = launch_env(base={})
    assert env["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "20"
    assert env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "60"
    assert env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "30"
    assert env["OMPI_MCA_orte_abort_on_non_zero_status"] == "1"


def test_no_fault_is_injected_without_the_variables():
    assert faults.callbacks_from_env(rank=1, environ={}) == []


def test_fault_goes_to_the_chosen_rank_only():
    env = {"HVDCOURSE_FAIL_RANK": "1", "HVDCOURSE_FAIL_AT_STEP": "4", "HVDCOURSE_FAIL_MODE": "kill"}
    assert faults.callbacks_from_env(rank=0, environ=env) == []
    assert len(faults.callbacks_from_env(rank=1, environ=env)) == 1


def test_fault_rank_comes_from_the_launchers_variables():
    assert faults.launcher_rank({"OMPI_COMM_WORLD_RANK": "3"}) == 3
    assert faults.launcher_rank({"HOROVOD_RANK": "2", "OMPI_COMM_WORLD_RANK": "5"}) == 2
    assert faults.launcher_rank({}) == 0


def test_unknown_fault_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="crash, kill, exit, hang"):
        faults.callbacks_from_env(
            rank=1, environ={"HVDCOURSE_FAIL_RANK": "1", "HVDCOURSE_FAIL_MODE": "explode"}
        )


def test_slow_rank_sleeps_before_each_step_from_the_given_one_and_only_on_that_rank(monkeypatch):
    env = {
        "HVDCOURSE_SLOW_RANK": "1",
        "HVDCOURSE_SLOW_FROM_STEP": "2",
        "HVDCOURSE_SLOW_SECONDS": "0.05",
    }
    assert faults.callbacks_from_env(rank=0, environ=env, framework="torch") == []
    (slow,) = faults.callbacks_from_env(rank=1, environ=env, framework="torch")
    # the sleeps it asks for, recorded per step (a wall-clock reading would also count the load)
    slept = []
    monkeypatch.setattr(faults.time, "sleep", slept.append)
    for step in (1, 2, 3):
        slept.append(f"step {step} begins")
        slow.on_train_batch_begin(0, None, None)
    assert slept == ["step 1 begins", "step 2 begins", 0.05, "step 3 begins", 0.05]


def test_crash_callback_raises_after_the_given_step():
    callback = faults.fault_callback(rank=0, at_step=2, mode="crash")
    callback.on_train_batch_end(0)
    with pytest.raises(faults.InjectedFault, match="rank 0 at step 2"):
        callback.on_train_batch_end(1)


@pytest.mark.parametrize(
    "output, expected",
    [
        (
            "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).",
            "rank 1 failed first (killed by signal 9, Killed)",
        ),
        ("  Process name: [[16067,1],1]\n  Exit code:    1\n", "rank 1 failed first (exit code 1)"),
        (
            "Process name: 1\nExit code: 137\n",
            "rank 1 failed first (exit code 137: killed by SIGKILL)",
        ),
        (
            "Process name: localhost[1]\nExit code: 134\n",
            "the worker in slot 1 of host localhost failed first (exit code 134: killed by SIGABRT)",
        ),
        (
            "Missing ranks:\n[1,0]<stderr>:1!: [grads_0]\n",
            "rank 1 failed first (stalled: it never joined the others' collective)",
        ),
        (
            "[hvdcourse] rank 0 stopped: Horovod was shut down\n[hvdcourse] rank 1 failed: ValueError: bad\n"
            "  Process name: [[5,1],0]\n  Exit code:    1\n",
            "rank 1 failed first (ValueError: bad)",
        ),
        (
            "error: data file 'x.npz' is corrupt\n  Process name: [[5,1],1]\n  Exit code:    2\n",
            "stopped on a reported error: data file 'x.npz' is corrupt",
        ),
        ("no clue here", ""),
    ],
)
def test_failure_summary_names_the_rank_that_failed_first(output, expected):
    assert failure_summary(output) == expected


def test_leftover_scan_finds_an_orphaned_process_by_its_marker():
    marker = f"leftover-test-{os.getpid()}"
    # the child forks a grandchild and exits at once: the grandchild is an orphan, as a rank
    # whose launcher died would be
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(120)\n"
    subprocess.run(
        [PYTHON, "-c", code], env={**os.environ, "HVDCOURSE_TEST_SESSION": marker}, check=True
    )
    try:
        found = faults.leftover_processes("HVDCOURSE_TEST_SESSION", marker, wait=0)
        assert len(found) == 1 and "time.sleep" in found[0][1]
    finally:
        faults.kill_processes(
            pid for pid, _ in faults.leftover_processes("HVDCOURSE_TEST_SESSION", marker, 0)
        )
    assert faults.leftover_processes("HVDCOURSE_TEST_SESSION", marker, wait=5) == []


def test_fault_runner_rejects_a_module_without_main(tmp_path):
    proc = subprocess.run(
        [PYTHON, "-m", "hvdcourse.course.lessons.faults", "hvdcourse.runtime.mpienv"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 2
    assert "has no main(argv, callbacks) function" in proc.stderr and "Traceback" not in proc.stderr


def test_session_fails_when_a_test_leaves_a_process_behind(tmp_path):
    probe = os.path.join(ROOT, "tests", "helpers", "leaves_a_process.py")
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "--confcutdir",
            os.path.join(ROOT, "tests"),
            probe,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.join(ROOT, "tests"),
        env={**os.environ, "HVDCOURSE_LEFTOVER_WAIT": "1"},
    )
    out = proc.stdout + proc.stderr
    assert "1 passed" in out  # the test itself passed ...
    assert proc.returncode == 1, out  # ... but the session failed
    assert (
        "1 process(es) started by the tests outlived the session" in out
        and "time.sleep(120)" in out
    )
    pid = int(out.split("pid ", 1)[1].split(":", 1)[0])
    time.sleep(0.5)
    # and was killed
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
