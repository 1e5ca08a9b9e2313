"""One GPU per rank (hvdcourse.runtime.devices), without a GPU: the rule, and every trainer's device
choice under each GPU site's slurm/select-gpu, with the frameworks and Horovod faked."""

import os
import subprocess
import sys
import types

import pytest

from conftest import ROOT
from hvdcourse.examples import torch_training, training
from hvdcourse.runtime import binding, devices
from hvdcourse.runtime.mpienv import launch_env

NO_GPU_VARS = {var: None for var in devices.VISIBLE_VARS}


def env(**values):
    """An environment for gpu_index: the visible-device variables unset unless given."""
    return {k: v for k, v in {**NO_GPU_VARS, **values}.items() if v is not None}


# --- The rule ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("local_size", [1, 2, 9])
def test_without_a_gpu_every_rank_stays_on_the_cpu(local_size):
    assert devices.gpu_index(0, local_size - 1, local_size, env()) is None


def test_with_every_gpu_visible_a_rank_takes_the_gpu_of_its_local_rank():
    assert [devices.gpu_index(4, r, 4, env()) for r in range(4)] == [0, 1, 2, 3]
    assert devices.gpu_index(8, 1, 2, env(CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")) == 1


@pytest.mark.parametrize("var", devices.VISIBLE_VARS)
def test_a_rank_the_launcher_gave_one_gpu_takes_device_0(var):
    # 8 ranks on the node, each seeing the one GPU the launcher gave it
    assert devices.gpu_index(1, 5, 8, env(**{var: "5"})) == 0


def test_more_ranks_than_gpus_is_a_one_line_error_that_says_what_to_do():
    with pytest.raises(devices.GpuChoiceError) as err:
        devices.gpu_index(4, 4, 8, env())
    text = str(err.value)
    assert "\n" not in text and text.startswith("8 ranks on this node but 4 GPU(s)")
    assert "--ntasks-per-node=4" in text and "HVD_SHARE_GPU=1" in text


def test_sharing_on_request_goes_round_robin_and_local_rank_0_says_what_it_costs(capsys):
    shared = env(HVD_SHARE_GPU="1")
    assert [devices.gpu_index(2, r, 4, shared) for r in range(4)] == [0, 1, 0, 1]
    err = capsys.readouterr().err
    assert err.count("[hvdcourse] HVD_SHARE_GPU=1: 4 ranks share 2 GPU(s)") == 1
    assert "Duplicate GPU detected" in err and "slower than one rank alone" in err


def fake_module(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


class FakeTorchDevice:
    def __init__(self, kind, index=None):
        self.type, self.index = kind, index


def fake_torch(count, chosen):
    """A ``torch`` with ``count`` GPUs; ``chosen`` gets every ``set_device`` index."""
    cuda = types.SimpleNamespace(
        is_available=lambda: count > 0, device_count=lambda: count, set_device=chosen.append
    )
    return fake_module("torch", cuda=cuda, device=FakeTorchDevice)


def test_torch_device_is_the_cpu_without_a_gpu_and_the_chosen_gpu_with_one(monkeypatch):
    chosen = []
    monkeypatch.setitem(sys.modules, "torch", fake_torch(0, chosen))
    assert devices.torch_device(0, 2, env()).type == "cpu" and chosen == []
    monkeypatch.setitem(sys.modules, "torch", fake_torch(4, chosen))
    device = devices.torch_device(3, 4, env())
    assert (device.type, device.index, chosen) == ("cuda", 3, [3])


# --- Every trainer, under every GPU site's launcher ------------------------------------------------------

TRAINERS = ["train_hvd", "train_tape", "train_torch_hvd", "train_torch_ddp"]


class Stop(Exception):
    """Raised where a trainer goes on after choosing its device."""


def stop(*args, **kwargs):
    raise Stop


def fake_frameworks(monkeypatch, count, local_rank, local_size):
    """TensorFlow, PyTorch, torch.distributed and Horovod as a trainer sees them on a node where this
    process sees ``count`` GPUs; returns the list that receives the GPU the trainer picks."""
    chosen = []
    gpus = [f"/physical_device:GPU:{i}" for i in range(count)]
    tf = fake_module(
        "tensorflow",
        config=types.SimpleNamespace(
            list_physical_devices=lambda kind: list(gpus) if kind == "GPU" else [],
            experimental=types.SimpleNamespace(set_memory_growth=lambda gpu, on: None),
            set_visible_devices=lambda gpu, kind: chosen.append(gpus.index(gpu)),
        ),
    )
    ranks = dict(
        init=lambda *a, **k: None,
        rank=lambda: local_rank,
        size=lambda: local_size,
        local_rank=lambda: local_rank,
        local_size=lambda: local_size,
    )
    hvd_tf = fake_module(
        "horovod.tensorflow", broadcast_object=stop, broadcast_variables=stop, **ranks
    )
    hvd_tf.keras = fake_module("horovod.tensorflow.keras", **ranks)
    hvd_torch = fake_module("horovod.torch", **ranks)
    horovod = fake_module("horovod", tensorflow=hvd_tf, torch=hvd_torch)
    torch = fake_torch(count, chosen)
    dist = fake_module(
        "torch.distributed",
        init_process_group=lambda backend: None,
        get_rank=lambda: local_rank,
        get_world_size=lambda: local_size,
    )
    data = fake_module("torch.utils.data", DataLoader=None, TensorDataset=None)
    data.distributed = fake_module("torch.utils.data.distributed", DistributedSampler=None)
    torch.utils = fake_module("torch.utils", data=data)
    torch.distributed = dist
    torch.nn = fake_module("torch.nn")
    torch.nn.parallel = fake_module("torch.nn.parallel", DistributedDataParallel=None)
    for module in (tf, horovod, hvd_tf, hvd_tf.keras, hvd_torch, torch, dist, data):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    for module in (torch.utils, data.distributed, torch.nn, torch.nn.parallel):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    # the first thing every trainer does after choosing its device: share the node's cores
    monkeypatch.setattr(training, "set_threads", stop)
    monkeypatch.setattr(torch_training, "set_threads", stop)
    monkeypatch.setenv("LOCAL_RANK", str(local_rank))  # what torchrun sets for DDP
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_size))
    return chosen


def trainer_gpu(monkeypatch, trainer, count, local_rank, local_size, visible):
    """The GPU index that ``trainer``'s own code picks, in the environment ``visible``."""
    for var in devices.VISIBLE_VARS + (devices.SHARE_VAR,):
        monkeypatch.delenv(var, raising=False)
    for var, value in visible.items():
        monkeypatch.setenv(var, value)
    chosen = fake_frameworks(monkeypatch, count, local_rank, local_size)
    module = __import__(f"hvdcourse.examples.{trainer}", fromlist=["main"])
    with pytest.raises(Stop):
        module.main([])
    assert len(chosen) == 1, chosen
    return chosen[0]


def site(name):
    """(visible-devices variable, GPUs per node, Slurm binds each task to one GPU) of a site file."""
    values = binding.read_site(os.path.join(ROOT, "slurm", "sites", f"{name}.env"))
    options = dict(o.lstrip("-").split("=", 1) for o in values["SITE_SBATCH"].split() if "=" in o)
    per_task = "gpus-per-task" in options
    gpus = (
        int(options["ntasks-per-node"]) * int(options["gpus-per-task"])
        if per_task
        else int(options["gpus-per-node"])
    )
    return values["SITE_GPU_VISIBLE_VAR"], gpus, per_task and bool(values.get("SITE_GPU_BIND"))


def slurm_and_select_gpu(var, local_rank, slurm_value):
    """The visible-device variables after Slurm set ``var`` to ``slurm_value`` and slurm/select-gpu ran."""
    base = {k: v for k, v in launch_env().items() if not k.endswith("_VISIBLE_DEVICES")}
    proc = subprocess.run(
        [os.path.join(ROOT, "slurm", "select-gpu"), "env"],
        capture_output=True,
        text=True,
        timeout=20,
        env={
            **base,
            "SITE_GPU_VISIBLE_VAR": var,
            "SLURM_LOCALID": str(local_rank),
            var: slurm_value,
        },
    )
    assert proc.returncode == 0, proc.stderr
    found = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return {k: v for k, v in found.items() if k in devices.VISIBLE_VARS}


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize("name", ["lumi-g", "nvidia-generic", "gh200"])
def test_every_local_rank_of_a_gpu_site_gets_its_own_gpu(monkeypatch, name, trainer):
    var, gpus, bound = site(name)
    picked = {}
    for local_rank in range(gpus):  # LUMI-G: 8 GCDs; the NVIDIA sites: 4 GPUs per node
        # --gpus-per-task=1 --gpu-bind=single:1: Slurm gives each task one GPU, whichever is closest
        # (a rotation here); --gpus-per-node: every task sees the node's GPUs
        slurm_value = str((local_rank + 1) % gpus) if bound else ",".join(map(str, range(gpus)))
        visible = slurm_and_select_gpu(var, local_rank, slurm_value)
        seen = devices.visible_devices(visible[var])
        index = trainer_gpu(monkeypatch, trainer, len(seen), local_rank, gpus, visible)
        picked[local_rank] = seen[index]  # the node's GPU this rank computes on
    expected = {r: str((r + 1) % gpus if bound else r) for r in range(gpus)}
    assert picked == expected


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_trainer_under_horovodrun_takes_the_gpu_of_its_local_rank(monkeypatch, trainer):
    # no narrowing launcher: the 4 GPUs are visible to all 4 ranks of the node
    assert [trainer_gpu(monkeypatch, trainer, 4, r, 4, {}) for r in range(4)] == [0, 1, 2, 3]


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_trainer_refuses_more_ranks_than_gpus(monkeypatch, trainer):
    with pytest.raises(devices.GpuChoiceError, match="8 ranks on this node but 4 GPU"):
        trainer_gpu(monkeypatch, trainer, 4, 5, 8, {})


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_trainer_stays_on_the_cpu_without_a_gpu(monkeypatch, trainer):
    for var in devices.VISIBLE_VARS:
        monkeypatch.delenv(var, raising=False)
    fake_frameworks(monkeypatch, 0, 1, 9)
    module = __import__(f"hvdcourse.examples.{trainer}", fromlist=["main"])
    with pytest.raises(Stop):  # reached the next step: no error, no GPU chosen
        module.main([])


def test_more_local_ranks_than_the_nodes_gpus_stop_in_select_gpu():
    # 8 ranks on a 4-GPU node of an NVIDIA site, asked with --gpus-per-node=4: ranks 4-7 have none
    var, gpus, _ = site("nvidia-generic")
    base = {k: v for k, v in launch_env().items() if not k.endswith("_VISIBLE_DEVICES")}
    codes = [
        subprocess.run(
            [os.path.join(ROOT, "slurm", "select-gpu"), "true"],
            capture_output=True,
            timeout=20,
            env={**base, "SITE_GPU_VISIBLE_VAR": var, "SLURM_LOCALID": str(r), var: "0,1,2,3"},
        ).returncode
        for r in range(8)
    ]
    assert codes == [0] * gpus + [2] * (8 - gpus)
