"""What a lesson page prints of a run or a command: ``show`` and ``sh``, imported by the pages'
setup cells (lessons: Converting a Keras MNIST script to Horovod; Converting to Horovod: going
further; PyTorch with Horovod, and DDP; Faults, hangs and elastic training; Multi-node training with
Slurm; Installing Horovod).
"""

from __future__ import annotations

import os
import re
import subprocess

# the lines of a training run worth reading: the trainers' own lines, Keras's epoch lines, warm-up
# and checkpoints (the rest is the frameworks' start-up chatter)
KERAS_LINES = ("[train_", "Epoch ", " - loss", "warmup", "[checkpoint]")
TORCH_LINES = ("[train_", "epoch ", "warm", "[checkpoint]")


def show(run, keep=KERAS_LINES) -> None:
    """Print the lines of ``run`` (a :class:`~hvdcourse.runtime.launch.RankRun`) that hold one of
    ``keep``, then its wall-clock time; a failed run raises with its last lines instead."""
    if not run.ok:
        raise RuntimeError(
            f"the run failed (exit {run.returncode}); its last lines:\n{run.output[-2500:]}"
        )
    for line in run.output.splitlines():
        if any(k in line for k in keep):
            print(line.strip())
    print(f"-- {run.seconds:.1f} s wall-clock")


def show_torch(run) -> None:
    """:func:`show` for the PyTorch trainers, whose epoch lines are their own."""
    show(run, TORCH_LINES)


def show_matching(run, pattern: str, limit: int = 12) -> None:
    """Print the first ``limit`` lines of ``run``'s output that match the regular expression
    ``pattern``, without the launcher's rank tags (``[1,0]<stdout>:``)."""
    lines = [re.sub(r"^\[[\d,]+\]<std\w+>:", "", line) for line in run.output.splitlines()]
    for line in [line for line in lines if re.search(pattern, line)][:limit]:
        print(line[:220])


def sh(*cmd, env=None, timeout: float = 120, cwd=None) -> int:
    """Run a command and print what it printed (errors included); return its exit status.

    ``cmd``: one shell line (``sh("mpirun -np 2 true | head -3")``) or a program and its arguments
    (``sh(SUBMIT, "cpu", "--", "--epochs", "3")``). ``env``: changes to this process's environment
    for the command, a value of None removing the variable."""
    environ = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    shell = len(cmd) == 1
    proc = subprocess.run(
        cmd[0] if shell else list(cmd),
        shell=shell,
        capture_output=True,
        text=True,
        env=environ,
        timeout=timeout,
        cwd=cwd,
    )
    print((proc.stdout + proc.stderr).strip())
    return proc.returncode
