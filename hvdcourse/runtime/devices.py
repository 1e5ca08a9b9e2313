"""Which GPU a rank takes: one rule for every trainer and every launcher (lesson: Converting a Keras
MNIST script to Horovod).

A launcher either leaves every GPU of the node visible to every rank (``horovodrun``, ``mpirun``,
``torchrun``, ``srun --gpus-per-node``), or narrows each rank's view to its own GPU
(``srun --gpus-per-task=1 --gpu-bind=...``, the course's ``slurm/select-gpu``), by setting
``CUDA_VISIBLE_DEVICES`` (NVIDIA), ``ROCR_VISIBLE_DEVICES`` or ``HIP_VISIBLE_DEVICES`` (AMD) to one
device. In the second case the rank's GPU is device 0 of what it sees; in the first it is GPU
``local_rank``, and a node with more ranks than GPUs is an error: NCCL refuses two ranks on one GPU
(``NCCL WARN Duplicate GPU detected``), later and less clearly. ``HVD_SHARE_GPU=1`` lets ranks share
GPUs anyway, for a Horovod built without NCCL, and says what that costs.

:func:`gpu_index` is the rule, without any framework; :func:`torch_device` applies it to PyTorch.
The TensorFlow trainers call :func:`gpu_index` with ``len(tf.config.list_physical_devices("GPU"))``.
Without a GPU every function here gives the CPU, silently, as before.
"""

from __future__ import annotations

import os
import sys

from hvdcourse.runtime.errors import UsageError

VISIBLE_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
SHARE_VAR = "HVD_SHARE_GPU"
# what sharing costs (the course's GPU probe measured it: the GPU check, hvdcourse.course.check.gpu, cites it)
SHARING_COST = (
    "NCCL refuses two ranks on one GPU ('NCCL WARN Duplicate GPU detected', 'invalid usage' in "
    "torch), so sharing runs only with a Horovod built without HOROVOD_GPU_OPERATIONS (GPU tensors "
    "staged through host memory, Gloo operations), and every rank on a shared GPU is slower than "
    "one rank alone"
)


class GpuChoiceError(UsageError):
    """More ranks on a node than GPUs, and sharing was not asked for."""


def visible_devices(value: str | None) -> list:
    """The entries of a ``*_VISIBLE_DEVICES`` value (``"0,1"`` -> ``["0", "1"]``; unset -> [])."""
    return [entry.strip() for entry in (value or "").split(",") if entry.strip()]


def narrowed_by(env=None) -> str | None:
    """The variable by which the launcher left this rank exactly one GPU, or None."""
    env = os.environ if env is None else env
    for var in VISIBLE_VARS:
        if len(visible_devices(env.get(var))) == 1:
            return var
    return None


def sharing_allowed(env=None) -> bool:
    env = os.environ if env is None else env
    return env.get(SHARE_VAR, "").strip() not in ("", "0")


def gpu_index(count: int, local_rank: int, local_size: int, env=None) -> int | None:
    """The index (among the ``count`` GPUs this process sees) of this rank's GPU; None: no GPU, CPU.

    The launcher's choice first: one visible device (see :func:`narrowed_by`) is this rank's, index
    0. Otherwise GPU ``local_rank``; more ranks on the node (``local_size``) than GPUs raises
    :class:`GpuChoiceError` in one line, unless ``HVD_SHARE_GPU=1`` (then ``local_rank % count``,
    and local rank 0 prints what sharing costs).
    """
    if count < 1:
        return None
    if narrowed_by(env):
        return 0
    if local_size > count:
        if not sharing_allowed(env):
            raise GpuChoiceError(
                f"{local_size} ranks on this node but {count} GPU(s): NCCL needs one GPU per rank. "
                f"Start at most {count} rank(s) per node (srun --ntasks-per-node={count} "
                f"--gpus-per-task=1, horovodrun -np {count}), or set {SHARE_VAR}=1 to share GPUs"
            )
        if local_rank == 0:
            print(
                f"[hvdcourse] {SHARE_VAR}=1: {local_size} ranks share {count} GPU(s) on this node. "
                f"{SHARING_COST}.",
                file=sys.stderr,
                flush=True,
            )
        return local_rank % count
    return local_rank


def torch_device(local_rank: int, local_size: int, env=None):
    """PyTorch: this rank's ``torch.device`` (``cuda:i``, made the current device) or the CPU."""
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    index = gpu_index(torch.cuda.device_count(), local_rank, local_size, env)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)
