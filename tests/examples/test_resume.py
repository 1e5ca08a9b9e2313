"""A 2-rank run killed mid-training resumes exactly from rank 0's last checkpoint; a corrupt one stops cleanly.

The first run is killed (SIGKILL on rank 1, in epoch 3, after the checkpoints of epochs 1 and 2);
the same command is started again, as a Slurm requeue would, and must continue from epoch 2 with
the weights and optimizer state saved then, on every rank from its first step, and end with the
weights of a run that was never interrupted (same seeds, same data order), identical on both ranks.
The custom-loop trainer (train_tape) and the PyTorch ones (train_torch_hvd under mpirun,
train_torch_ddp under torchrun) are checked here. The Keras trainer's (train_hvd) same three runs are
made by lesson 10 (Fault tolerance), whose cells assert all of this of them (the killed run ends by
itself naming rank 1 after the checkpoints of epochs 1 and 2; the resumed run starts at epoch 3, rank 0
alone restores epoch 2's state, every rank's first step holds it, the step count goes on, the end is
what rank 0 saved last and bit-identical to the uninterrupted run): the book's build fails otherwise.
"""

import pytest

from conftest import PYTHON
from hvdcourse.course.lessons import faults
from hvdcourse.runtime.launch import run_ranks

STEPS = 5
ARGS = [
    "--epochs",
    "4",
    "--max-steps",
    str(STEPS),
    "--batch-size",
    "32",
    "--checkpoint-dir",
    "ckpt",
]
KILL_AT_STEP = 2 * STEPS + 3  # in epoch 3, after two checkpoints
# hang guard: one 4-epoch run on 2 ranks takes 20-40 s on a quiet machine, start-up included; how
# long a run took is the machine's business, not asserted
RUN_TIMEOUT = 300
# (trainer, launcher) of each kill-and-resume comparison
TRAINERS = {
    "train_tape": ("hvdcourse.examples.train_tape", "mpirun"),
    "train_torch_hvd": ("hvdcourse.examples.train_torch_hvd", "mpirun"),
    "train_torch_ddp": ("hvdcourse.examples.train_torch_ddp", "torchrun"),
}


_COMPARISONS: dict = {}  # trainer name -> its comparison, made once for the module


def comparison(name, tmp_path_factory):
    """The trainer's three runs (uninterrupted, killed, resumed: faults.compare_resume), made once."""
    if name not in _COMPARISONS:
        trainer, launcher = TRAINERS[name]
        _COMPARISONS[name] = faults.compare_resume(
            ARGS,
            KILL_AT_STEP,
            trainer=trainer,
            launcher=launcher,
            timeout=RUN_TIMEOUT,
            cwd=str(tmp_path_factory.mktemp(f"resume-{name}")),
        )
    return _COMPARISONS[name]


@pytest.fixture(scope="module", params=sorted(TRAINERS))
def resume_check(request, tmp_path_factory):
    return request.param, comparison(request.param, tmp_path_factory)


# Horovod's broadcast_optimizer_state gives an optimizer with no state yet one step with zero
# gradients (so that there is a state to send): PyTorch's Adam then counts one step more
EXTRA_STEPS = {"train_torch_hvd": 1}


def test_corrupt_checkpoint_stops_every_rank_with_a_clear_message(tmp_path):
    # the checkpoints of a whole run (one process: what rank 0 writes), then one of them corrupted
    first = run_ranks(
        [PYTHON, "-m", "hvdcourse.examples.train_hvd", *ARGS],
        np=1,
        launcher="python",
        timeout=RUN_TIMEOUT,
        cwd=str(tmp_path),
    )
    assert first.ok, first.output[-3000:]
    index = tmp_path / "ckpt" / "ckpt-4.index"
    index.write_bytes(b"not a checkpoint index" * 4)
    before = {p.name: p.read_bytes() for p in (tmp_path / "ckpt").iterdir()}
    run = run_ranks(
        [PYTHON, "-m", "hvdcourse.examples.train_hvd", *ARGS],
        np=2,
        launcher="mpirun",
        timeout=120,
        cwd=str(tmp_path),
    )
    assert run.returncode == 2 and not run.timed_out, run.output[-3000:]
    assert "error: cannot restore checkpoint" in run.output and "ckpt-4" in run.output
    assert "--no-resume" in run.output  # says what to do
    assert "Traceback" not in run.output
    assert run.failure.startswith("stopped on a reported error: cannot restore checkpoint")
    # nothing overwritten
    assert {p.name: p.read_bytes() for p in (tmp_path / "ckpt").iterdir()} == before


def test_every_rank_takes_its_first_resumed_step_from_rank0s_restored_state(resume_check):
    trainer, check = resume_check
    assert not check.killed.ok and check.resumed.ok, check.resumed.output[-3000:]
    assert sorted(check.first_step) == [0, 1], check.resumed.output[-3000:]
    # weights, Adam's moments and step count: rank 1 holds what rank 0 holds before its first step...
    assert check.first_step[1] == check.first_step[0]
    # ... and that is what rank 0 restored (2 epochs of steps done)
    assert check.first_step[0] == check.restored
    assert check.restored["optimizer_iterations"] == 2 * STEPS + EXTRA_STEPS.get(trainer, 0)


def test_killed_and_resumed_run_ends_with_the_weights_of_an_uninterrupted_run(resume_check):
    _, check = resume_check
    assert check.uninterrupted.ok, check.uninterrupted.output[-3000:]
    assert check.resumed.ok, check.resumed.output[-3000:]
    assert sorted(check.uninterrupted_digests) == sorted(check.resumed_digests) == [0, 1]
    assert check.resumed_digests == check.uninterrupted_digests  # bit-identical, on every rank
    assert check.exact
