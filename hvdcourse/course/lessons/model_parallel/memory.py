"""How much memory training a model needs per device, and which parallelism makes it fit
(lesson: Model parallelism by hand).

Per device, for ``P`` parameters, tensor parallelism ``t``, pipeline parallelism ``p``, ``d``
data-parallel ranks and ZeRO stage ``z``:

* weights, gradients and Adam's state, bytes per parameter from :data:`PRECISIONS` (mixed precision:
  2 + 2 + 12, the 16 bytes of ZeRO's paper; fp32: 4 + 4 + 8), each divided by ``t * p`` (every
  device holds its share of the layers), and by ``d`` for the optimizer state from stage 1, the
  gradients from stage 2 and the weights from stage 3 (stage 3 is PyTorch's FSDP ``FULL_SHARD``);
* activations kept for the backward pass, 16-bit, per transformer layer and micro-batch of ``b``
  sequences of length ``s`` with hidden size ``h`` and ``a`` heads, counted tensor by tensor as
  Korthikanti et al. 2022 (arXiv:2205.05198, section 4.1) count them for a GPT block, but for the
  block the model has (:func:`activation_terms`): for GPT's block (GeLU MLP of inner size 4h,
  dropout) the count is their eq. 2 and 3, ``s*b*h*(34 + 5*a*s/h)`` bytes without tensor
  parallelism, ``s*b*h*(10 + 24/t + 5*a*s/(h*t))`` with it (no sequence parallelism); a Llama
  block (SwiGLU MLP, no dropout, grouped-query attention) keeps about half as much. With full
  recomputation only each layer's input is kept: ``2*s*b*h``. With 1F1B the first pipeline stage
  holds ``p`` micro-batches of its ``L/p`` layers: ``L`` layers' worth, whatever ``p``.

Temporary buffers, the framework's own memory and fragmentation are not counted: a plan that fits
with little to spare may still not run. The models and devices are those of
:mod:`hvdcourse.course.lessons.hardware` (lesson: Why distributed training).
"""

from __future__ import annotations

from dataclasses import dataclass

from hvdcourse.course.lessons import hardware

# counted in hardware.py (lesson 1 uses them too), used here by name
from hvdcourse.course.lessons.hardware import activation_bytes_per_layer, activation_terms  # noqa: F401
from hvdcourse.runtime.errors import UsageError

# bytes per parameter: weights, gradients, optimizer state (Adam)
PRECISIONS = {"mixed": (2, 2, 12), "fp32": (4, 4, 8)}

TOOLS = {
    "data": "Horovod, PyTorch DDP, tf.distribute",
    "zero1": "DeepSpeed ZeRO stage 1, PyTorch's ZeroRedundancyOptimizer",
    "zero2": "DeepSpeed ZeRO stage 2, PyTorch FSDP (SHARD_GRAD_OP; FSDP2: "
    "fully_shard(reshard_after_forward=False))",
    "zero3": "DeepSpeed ZeRO stage 3, PyTorch FSDP (FULL_SHARD; FSDP2: "
    "fully_shard(reshard_after_forward=True))",
    "tensor": "Megatron-LM (Megatron Core), PyTorch's torch.distributed.tensor.parallel",
    "tensor+pipeline": "Megatron-LM, DeepSpeed's pipeline engine, PyTorch's torch.distributed.pipelining (with tensor parallelism)",
}


@dataclass(frozen=True)
class Plan:
    """A way to lay a model out: ``tensor`` x ``pipeline`` devices per replica, ZeRO over ``data``."""

    name: str
    kind: str  # a key of TOOLS
    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    zero: int = 0

    @property
    def devices(self) -> int:
        """Devices this plan needs at least (one replica; ZeRO needs its ``data`` ranks)."""
        return self.tensor * self.pipeline * self.data


def model_named(name: str) -> hardware.Transformer:
    """The model of :data:`hvdcourse.course.lessons.hardware.MODELS` called ``name``."""
    for model in hardware.MODELS:
        if model.name == name:
            return model
    known = ", ".join(m.name for m in hardware.MODELS)
    raise UsageError(f"no model called {name!r}; choose one of: {known}")


def node_named(name: str) -> hardware.Node:
    """The node of :data:`hvdcourse.course.lessons.hardware.NODES` called ``name``."""
    if name not in hardware.NODES:
        raise UsageError(f"no node called {name!r}; choose one of: {', '.join(hardware.NODES)}")
    return hardware.NODES[name]


def per_device_gb(
    model: hardware.Transformer,
    plan: Plan,
    micro_batch: int = 1,
    precision: str = "mixed",
    recompute: bool = False,
) -> dict:
    """GB per device of ``weights``, ``gradients``, ``optimizer``, ``activations`` and their ``total``."""
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if model.heads % plan.tensor or model.layers % plan.pipeline:
        raise UsageError(
            f"{model.name} has {model.heads} heads and {model.layers} layers: tensor parallelism "
            f"must divide the heads and pipeline parallelism the layers (got {plan.tensor} and "
            f"{plan.pipeline})"
        )
    weights, grads, optimizer = (
        model.params * per / (plan.tensor * plan.pipeline) for per in PRECISIONS[precision]
    )
    if plan.zero >= 1:
        optimizer /= plan.data
    if plan.zero >= 2:
        grads /= plan.data
    if plan.zero >= 3:
        weights /= plan.data
    activations = model.layers * activation_bytes_per_layer(
        model, micro_batch, plan.tensor, recompute
    )
    parts = {
        "weights": weights,
        "gradients": grads,
        "optimizer": optimizer,
        "activations": activations,
    }
    parts = {k: v / hardware.GB for k, v in parts.items()}
    parts["total"] = sum(parts.values())
    return parts


def candidate_plans(model: hardware.Transformer, node: hardware.Node) -> list:
    """Plans from the simplest to the most involved: data parallelism, ZeRO 1-3 over one node,
    tensor parallelism within a node, then a whole node's tensor parallelism times a pipeline
    over several nodes."""
    g = node.devices
    plans = [Plan("data parallel (every device holds everything)", "data")]
    plans += [
        Plan(f"ZeRO-{z} over the {g} devices of a node", f"zero{z}", data=g, zero=z)
        for z in (1, 2, 3)
    ]
    t = 2
    while t <= g:
        if model.heads % t == 0:
            plans.append(Plan(f"tensor parallel over {t} devices", "tensor", tensor=t))
        t *= 2
    tensor = max(p.tensor for p in plans)
    for stages in range(2, model.layers + 1):
        if model.layers % stages == 0:
            plans.append(
                Plan(
                    f"tensor parallel over {tensor} devices x pipeline of {stages} stages",
                    "tensor+pipeline",
                    tensor=tensor,
                    pipeline=stages,
                )
            )
    return plans


def advise(
    model_name: str,
    node_name: str,
    micro_batch: int = 1,
    precision: str = "mixed",
    recompute: bool = False,
) -> dict:
    """The simplest plan of :func:`candidate_plans` under which ``model_name`` trains on
    ``node_name``'s devices, with its memory per device; ``plan`` is ``None`` if none fits."""
    model, node = model_named(model_name), node_named(node_name)
    capacity = node.device.memory_gb
    alone = per_device_gb(model, Plan("one device", "data"), micro_batch, precision, recompute)
    for plan in candidate_plans(model, node):
        need = per_device_gb(model, plan, micro_batch, precision, recompute)
        if need["total"] <= capacity:
            return {
                "model": model.name,
                "device": node.device.name,
                "device_gb": capacity,
                "one_device": alone,
                "fits_one_device": plan.kind == "data",
                "plan": plan,
                "per_device": need,
                "tools": TOOLS[plan.kind],
            }
    return {
        "model": model.name,
        "device": node.device.name,
        "device_gb": capacity,
        "one_device": alone,
        "fits_one_device": False,
        "plan": None,
        "per_device": None,
        "tools": "",
    }


def advice_table(micro_batch: int = 1, precision: str = "mixed", recompute: bool = False) -> list:
    """One row per model and node: memory on one device, and the simplest plan that fits."""
    rows = []
    for model in hardware.MODELS:
        for node in hardware.NODES.values():
            found = advise(model.name, node.name, micro_batch, precision, recompute)
            plan = found["plan"]
            rows.append(
                {
                    "model": model.name,
                    "node": node.name,
                    "one device (GB)": found["one_device"]["total"],
                    "device (GB)": found["device_gb"],
                    "simplest plan that fits": plan.name if plan else "none of these",
                    "devices": plan.devices if plan else None,
                    "per device (GB)": found["per_device"]["total"] if plan else None,
                    "tools": found["tools"],
                }
            )
    return rows
