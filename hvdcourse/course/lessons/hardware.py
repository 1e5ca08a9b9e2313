"""Accelerators, nodes and what a model needs from them (lesson: Why distributed training).

Vendor figures (peak numbers, per device) and two textbook estimates:

* memory of the training state: weights + gradients + Adam's two moments. In mixed precision
  that is 2 + 2 bytes (fp16/bf16 weights and gradients) + 12 bytes (fp32 master weights, momentum,
  variance) = 16 bytes per parameter (Rajbhandari et al. 2020, "ZeRO", arXiv:1910.02054); plain fp32
  training with Adam also needs 4 + 4 + 8 = 16 bytes;
* activations of a transformer layer kept for the backward pass, in 16-bit precision and without
  recomputation: s*b*h*(34 + 5*a*s/h) bytes for sequence length s, micro-batch b, hidden size h and
  a attention heads (Korthikanti et al. 2022, arXiv:2205.05198);
* compute of training a transformer: about 6 * parameters * tokens floating-point operations
  (Kaplan et al. 2020, arXiv:2001.08361).
"""

from __future__ import annotations

from dataclasses import dataclass

from hvdcourse.runtime.errors import UsageError

GB = 1e9  # vendors count memory in GB (10^9 bytes) in their datasheets; so do we
BYTES_PER_PARAM_ADAM = 16


@dataclass(frozen=True)
class Accelerator:
    """One device as the framework sees it (an MI250X GCD is one device)."""

    name: str
    memory_gb: float
    peak_bf16_tflops: float  # dense matrix peak, no sparsity
    memory_bandwidth_tbs: float


ACCELERATORS = {
    "MI250X GCD (LUMI-G)": Accelerator("MI250X GCD (LUMI-G)", 64, 383 / 2, 3.2 / 2),
    "H100 in GH200, HBM3": Accelerator("H100 in GH200, HBM3", 96, 989, 4.0),
    "H100 in GH200, HBM3e": Accelerator("H100 in GH200, HBM3e", 144, 989, 4.9),
}


@dataclass(frozen=True)
class Node:
    """A compute node: what a job gets when it asks for one whole node."""

    name: str
    devices: int
    device: Accelerator
    cpu: str
    host_memory: str
    network: str  # injection bandwidth of the node, all network cards together
    cpu_gpu_link: str


LUMI_G = Node(
    "LUMI-G",
    8,
    ACCELERATORS["MI250X GCD (LUMI-G)"],
    "1 AMD EPYC 7A53 'Trento', 64 cores (8 CCDs of 8 cores, 4 NUMA domains)",
    "512 GB DDR4",
    "4 x 200 Gb/s HPE Slingshot-11 = 800 Gb/s (one card per MI250X)",
    "Infinity Fabric, 36+36 GB/s per GCD",
)
GH200_NODE = Node(
    "Grace-Hopper (4 x GH200)",
    4,
    ACCELERATORS["H100 in GH200, HBM3"],
    "4 NVIDIA Grace, 72 Arm Neoverse V2 cores each (one per GPU)",
    "LPDDR5X next to each Grace (up to 480 GB per superchip; less on many systems)",
    "system-dependent; HPE Cray EX nodes (e.g. CSCS Alps) have 4 x 200 Gb/s Slingshot-11",
    "NVLink-C2C, 900 GB/s (450 per direction) per superchip",
)
NODES = {node.name: node for node in (LUMI_G, GH200_NODE)}


@dataclass(frozen=True)
class Transformer:
    """A decoder/encoder stack, described by the sizes the memory estimates need."""

    name: str
    params: float
    layers: int
    hidden: int
    heads: int
    seq_len: int
    # the block's shape, for the activation count of lesson "Model parallelism by hand": the MLP's
    # inner size (0: 4 * hidden), its kind ("gelu": two matrices; "swiglu": three, gated), the
    # key/value heads (0: as many as ``heads``; fewer: grouped-query attention), and dropout
    ffn: int = 0
    mlp: str = "gelu"
    kv_heads: int = 0
    dropout: bool = True


MODELS = [
    Transformer("BERT-Large", 340e6, 24, 1024, 16, 512),
    Transformer("GPT-2 XL", 1.5e9, 48, 1600, 25, 1024),
    # Llama 2 (Touvron et al. 2023, arXiv:2307.09288): SwiGLU MLP, no dropout; the 70B model uses
    # grouped-query attention with 8 key/value heads; inner sizes as in the released configurations
    Transformer("Llama-2 7B", 6.7e9, 32, 4096, 32, 4096, ffn=11008, mlp="swiglu", dropout=False),
    Transformer(
        "Llama-2 70B", 69e9, 80, 8192, 64, 4096, ffn=28672, mlp="swiglu", kv_heads=8, dropout=False
    ),
    Transformer("GPT-3", 175e9, 96, 12288, 96, 2048),
]


def training_state_gb(params: float, bytes_per_param: float = BYTES_PER_PARAM_ADAM) -> float:
    """Weights + gradients + optimizer state, in GB (16 bytes per parameter with Adam)."""
    return params * bytes_per_param / GB


def activation_terms(model: Transformer) -> dict:
    """What one layer keeps for the backward pass, in units of ``s*b*h`` bytes (16-bit values,
    1-byte dropout masks), counted the way Korthikanti et al. (section 4.1) count a GPT block:

    * ``replicated``: kept whole on every tensor-parallel rank: the two norms' inputs (2 + 2), the
      inputs of the QKV and of the first MLP matrices (2 + 2), and with dropout the two masks after
      the attention and the MLP blocks (1 + 1);
    * ``split``: divided by the tensor-parallel size: Q (2), K and V (2 each, times
      ``kv_heads / heads``), the output projection's input (2), and the MLP: GeLU's input and output
      (2 + 2 per inner size ``f``, in units of ``h``), or SwiGLU's two inputs and its output (2 + 2 + 2,
      as Megatron's fused SwiGLU keeps them);
    * ``scores``: the coefficient of ``a*s/h`` (also split): the softmax output (2), and with
      dropout its mask (1) and output (2): 5 for GPT, 2 without dropout.

    GPT's block gives 10, 24 and 5: eq. 2 of the paper, ``34 + 5*a*s/h``.
    """
    h = model.hidden
    f = (model.ffn or 4 * h) / h
    kv = (model.kv_heads or model.heads) / model.heads
    drop = 1 if model.dropout else 0
    if model.mlp == "gelu":
        mlp = 4 * f
    elif model.mlp == "swiglu":
        mlp = 6 * f
    else:
        raise UsageError(f"unknown MLP kind {model.mlp!r}; choose 'gelu' or 'swiglu'")
    return {"replicated": 8 + 2 * drop, "split": 2 + 4 * kv + 2 + mlp, "scores": 2 + 3 * drop}


def activation_bytes_per_layer(
    model: Transformer, micro_batch: int = 1, tensor: int = 1, recompute: bool = False
) -> float:
    """Bytes of activations one transformer layer keeps for one micro-batch
    (:func:`activation_terms`; Korthikanti et al. for a GPT block)."""
    s, h, a, b = model.seq_len, model.hidden, model.heads, micro_batch
    if recompute:
        return 2 * s * b * h
    terms = activation_terms(model)
    return (
        s * b * h * (terms["replicated"] + (terms["split"] + terms["scores"] * a * s / h) / tensor)
    )


def activation_gb(model: Transformer, batch: int = 1) -> float:
    """Activations kept for the backward pass, in GB, for ``batch`` sequences: each model's own block
    (:func:`activation_terms`), Korthikanti et al.'s eq. 2 for a GPT block."""
    return model.layers * activation_bytes_per_layer(model, micro_batch=batch) / GB


def max_batch(model: Transformer, device: Accelerator) -> int:
    """The largest batch (in sequences) whose training state and activations fit on one device."""
    free = device.memory_gb - training_state_gb(model.params)
    return max(0, int(free // activation_gb(model, 1)))


def training_flops(params: float, tokens: float) -> float:
    """About 6 floating-point operations per parameter and token (forward 2, backward 4)."""
    return 6 * params * tokens


def training_days(
    flops: float, devices: int, device: Accelerator, utilization: float = 0.4
) -> float:
    """Days of training on ``devices`` devices sustaining ``utilization`` of their peak, with perfect scaling."""
    return flops / (devices * device.peak_bf16_tflops * 1e12 * utilization) / 86400


def memory_table(device: Accelerator, batch: int = 1) -> list:
    """One row per model of :data:`MODELS`: what training needs vs what ``device`` has."""
    rows = []
    for m in MODELS:
        state, act = training_state_gb(m.params), activation_gb(m, batch)
        rows.append(
            {
                "model": m.name,
                "parameters (billions)": m.params / 1e9,
                "weights+grads+Adam (GB)": state,
                f"activations, batch {batch} (GB)": act,
                "total (GB)": state + act,
                f"{device.name} ({device.memory_gb:g} GB)": "fits"
                if state + act <= device.memory_gb
                else f"needs >= {int(-(-(state + act) // device.memory_gb))} devices' memory",
                "largest batch on one device": max_batch(m, device),
            }
        )
    return rows
