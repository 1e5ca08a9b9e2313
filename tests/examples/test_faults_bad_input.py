"""Bad input anywhere gets one clear line (what happened, what to do), a non-zero exit, no traceback,
never hangs (each run has a timeout that ends it), and loses nothing: the files involved are left as they were.

The course's own checks print ``hvdcourse: error: ...`` once and exit 2 (hvdcourse.runtime.errors);
argparse's usage errors print the usage and exit 2.

(The corrupt checkpoint is in test_resume.py, next to the checkpoints it corrupts.)
"""

import os
import subprocess

import numpy as np

from conftest import PYTHON, ROOT
from hvdcourse.runtime.launch import run_ranks

# ends a hung run (one that stops at start-up takes about 20 s on an idle machine): a run that
# reaches it failed to stop by itself; how long it took is the machine's business, not asserted
RUN_BOUND = 150
QUICK = ["--epochs", "1", "--max-steps", "2"]


def run_cli(args, env=None, cwd=None, timeout=120):
    proc = subprocess.run(
        [PYTHON, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode, proc.stdout + proc.stderr


def assert_clean_error(code, output, *phrases):
    assert code != 0, output[-2000:]
    for phrase in phrases:
        assert phrase in output, output[-2000:]
    assert "Traceback" not in output, output[-3000:]


def assert_one_error_line(code, output, *phrases, exit_code=2):
    """Exactly one ``hvdcourse: error:`` line, holding every phrase, and the documented exit code."""
    assert code == exit_code, output[-2000:]
    lines = [line for line in output.splitlines() if "hvdcourse: error:" in line]
    assert len(lines) == 1, output[-3000:]
    assert_clean_error(code, lines[0], *phrases)
    assert "Traceback" not in output, output[-3000:]


def test_wrong_argument_of_the_elastic_trainer_gets_a_usage_message():
    code, out = run_cli(["-m", "hvdcourse.examples.train_elastic", "--batches-per-commit", "0"])
    assert code == 2
    assert_clean_error(code, out, "--batches-per-commit", "must be a positive integer")


def test_wrong_fault_variable_gets_a_usage_message():
    code, out = run_cli(
        ["-m", "hvdcourse.course.lessons.faults", "hvdcourse.examples.train_hvd"],
        env={"HVDCOURSE_FAIL_RANK": "1", "HVDCOURSE_FAIL_MODE": "explode"},
    )
    assert_one_error_line(
        code, out, "HVDCOURSE_FAIL_MODE='explode' is not one of crash, kill, exit, hang"
    )


def test_single_process_launcher_with_two_ranks_is_refused_clearly():
    code, out = run_cli(
        ["-m", "hvdcourse.runtime.launch", "-np", "2", "--launcher", "python", "--", "true"]
    )
    assert_one_error_line(code, out, "hvdcourse: error: launcher 'python' runs a single process")


def path_without_mpi(tmp_path):
    """A PATH with the venv's tools (horovodrun) but no mpirun."""
    return os.pathsep.join([os.path.dirname(PYTHON), str(tmp_path)])


def test_missing_mpi_is_reported_with_how_to_install_it(tmp_path):
    for launcher in ("mpirun", "mpi"):
        code, out = run_cli(
            ["-m", "hvdcourse.runtime.launch", "-np", "2", "--launcher", launcher, "--", "true"],
            env={"PATH": path_without_mpi(tmp_path)},
        )
        assert_one_error_line(
            code, out, "MPI not found: no 'mpirun' on PATH", "apt-get install openmpi-bin"
        )


def test_corrupt_data_file_stops_every_rank_with_a_clear_message(tmp_path):
    data = tmp_path / "mnist.npz"
    data.write_bytes(b"PK\x03\x04 this is not a real npz archive")
    before = data.read_bytes()
    run = run_ranks(
        [
            PYTHON,
            "-m",
            "hvdcourse.examples.train_hvd",
            *QUICK,
            "--data",
            str(data),
            "--checkpoint-dir",
            "ckpt",
        ],
        np=2,
        launcher="mpirun",
        timeout=RUN_BOUND,
        cwd=str(tmp_path),
    )
    assert not run.timed_out, run.output[-3000:]
    assert_clean_error(
        run.returncode,
        run.output,
        f"hvdcourse: error: data file '{data}' is corrupt",
        "hvdcourse-prepare-data",
    )  # each rank read the file and says so
    assert run.failure.startswith("stopped on a reported error: data file")
    assert data.read_bytes() == before


def test_data_file_with_wrong_arrays_names_the_missing_ones(tmp_path):
    data = tmp_path / "other.npz"
    np.savez(data, images=np.zeros((2, 28, 28), np.uint8))
    code, out = run_cli(
        [
            "-m",
            "hvdcourse.examples.train_single",
            *QUICK,
            "--data",
            str(data),
            "--checkpoint-dir",
            "ckpt",
        ],
        cwd=str(tmp_path),
    )
    assert_one_error_line(code, out, "lacks the arrays ['x_train', 'y_train', 'x_test', 'y_test']")


def test_unwritable_checkpoint_folder_stops_the_run_with_a_clear_message(tmp_path):
    blocker = tmp_path / "not-a-folder"
    # root ignores chmod; this cannot be
    blocker.write_text("a file where the checkpoint folder should go\n")
    run = run_ranks(
        [
            PYTHON,
            "-m",
            "hvdcourse.examples.train_hvd",
            *QUICK,
            "--checkpoint-dir",
            str(blocker / "ckpt"),
        ],
        np=2,
        launcher="mpirun",
        timeout=RUN_BOUND,
        cwd=str(tmp_path),
    )
    assert not run.timed_out, run.output[-3000:]  # rank 1 did not wait forever for rank 0
    assert_one_error_line(run.returncode, run.output, "is not writable", "Pass --checkpoint-dir")
    assert blocker.read_text() == "a file where the checkpoint folder should go\n"


def test_malformed_exercise_marker_names_the_place_and_writes_nothing(tmp_path):
    source, learner, solutions = tmp_path / "source", tmp_path / "exercises", tmp_path / "solutions"
    for folder in (source, learner, solutions):
        folder.mkdir()
    with open(os.path.join(ROOT, "exercises", "source", "ex01_collectives.md")) as fh:
        text = fh.read()
    # drop the first END marker: the region it closed is now unterminated
    assert "### END SOLUTION\n" in text
    (source / "ex01_collectives.md").write_text(text.replace("### END SOLUTION\n", "", 1))
    (learner / "ex01_collectives.ipynb").write_text("previous learner notebook\n")
    code, out = run_cli(
        [
            "-m",
            "hvdcourse.course.exercises.generate",
            "--source",
            str(source),
            "--exercises",
            str(learner),
            "--solutions",
            str(solutions),
        ]
    )
    assert_one_error_line(code, out, "hvdcourse: error: ", "ex01_collectives.md", "cell")
    assert (learner / "ex01_collectives.ipynb").read_text() == "previous learner notebook\n"
    assert not list(solutions.iterdir())
