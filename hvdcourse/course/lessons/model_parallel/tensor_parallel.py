"""Tensor parallelism of a transformer's MLP block, the Megatron way (lesson: Model parallelism by hand).

The block is ``y = gelu(x @ W1 + b1) @ W2 + b2`` with ``x`` of shape (batch, hidden), ``W1`` of shape
(hidden, ffn) and ``W2`` of shape (ffn, hidden). Megatron-LM (Shoeybi et al. 2019, arXiv:1909.08053,
section 3) splits it over N ranks so that it communicates once each way:

1. ``W1`` and ``b1`` **column-wise**: rank r keeps ffn/N columns and computes its own slice of
   ``gelu(x @ W1 + b1)`` without talking to anyone (GeLU acts element by element, so the slice of
   the activation is the activation of the slice);
2. ``W2`` **row-wise**: rank r keeps the matching ffn/N rows, and ``a_r @ W2_r`` is a partial sum of
   ``y``: **one allreduce** adds the N partial sums (Megatron's operator *g*), then every rank adds
   ``b2``;
3. backward: every rank gets the whole ``dy``; the gradients of its own slices of ``W2``, ``W1``,
   ``b1`` need nothing else, and ``dx`` is again a sum of N partial products, ``dz_r @ W1_r.T``:
   **one allreduce** (the backward of Megatron's operator *f*, the identity in the forward pass).

Every function takes the MPI communicator ``comm`` (mpi4py) that spans the ranks of the block.
:func:`mlp_forward` and :func:`mlp_backward` are the single-process reference.
"""

from __future__ import annotations

import math

import numpy as np

from hvdcourse.runtime.errors import UsageError

_C = math.sqrt(2 / math.pi)


def gelu(z: np.ndarray) -> np.ndarray:
    """GeLU, tanh approximation (as GPT-2 and Megatron use it)."""
    return 0.5 * z * (1 + np.tanh(_C * (z + 0.044715 * z**3)))


def gelu_grad(z: np.ndarray) -> np.ndarray:
    """Derivative of :func:`gelu` with respect to its input."""
    inner = _C * (z + 0.044715 * z**3)
    t = np.tanh(inner)
    return 0.5 * (1 + t) + 0.5 * z * (1 - t**2) * _C * (1 + 3 * 0.044715 * z**2)


def init_mlp(hidden: int, ffn: int, seed: int = 0, dtype=np.float64) -> dict:
    """The whole block's parameters, the same on every rank for the same ``seed``."""
    rng = np.random.default_rng(seed)
    return {
        "W1": (rng.standard_normal((hidden, ffn)) / math.sqrt(hidden)).astype(dtype),
        "b1": (0.1 * rng.standard_normal(ffn)).astype(dtype),
        "W2": (rng.standard_normal((ffn, hidden)) / math.sqrt(ffn)).astype(dtype),
        "b2": (0.1 * rng.standard_normal(hidden)).astype(dtype),
    }


# ----------------------------------------------------------------------- one process: the reference


def mlp_forward(params: dict, x: np.ndarray):
    """``y`` and what the backward pass needs, on one process."""
    z = x @ params["W1"] + params["b1"]
    a = gelu(z)
    return a @ params["W2"] + params["b2"], {"x": x, "z": z, "a": a}


def mlp_backward(params: dict, cache: dict, dy: np.ndarray):
    """``dx`` and the gradients of all parameters for the output gradient ``dy``, on one process."""
    grads = {"W2": cache["a"].T @ dy, "b2": dy.sum(axis=0)}
    dz = (dy @ params["W2"].T) * gelu_grad(cache["z"])
    grads["W1"] = cache["x"].T @ dz
    grads["b1"] = dz.sum(axis=0)
    return dz @ params["W1"].T, grads


# ----------------------------------------------------------------------- N ranks


def column_range(ffn: int, rank: int, size: int) -> tuple:
    """The (start, stop) columns of ``W1`` (and rows of ``W2``) that ``rank`` of ``size`` keeps."""
    if size < 1 or not 0 <= rank < size:
        raise UsageError(f"rank {rank} is not one of {size} ranks")
    if ffn % size:
        raise UsageError(
            f"the MLP's inner size {ffn} is not divisible by {size} ranks: every rank must keep "
            f"the same number of columns; choose an inner size that is a multiple of {size}"
        )
    width = ffn // size
    return rank * width, (rank + 1) * width


def shard_mlp(params: dict, rank: int, size: int) -> dict:
    """Rank ``rank``'s part of the block: columns of ``W1``/``b1``, rows of ``W2``, all of ``b2``.

    ``b2`` is kept whole on every rank and added once, after the allreduce (adding it on every
    rank before the sum would count it N times).
    """
    start, stop = column_range(params["W1"].shape[1], rank, size)
    return {
        "W1": params["W1"][:, start:stop].copy(),
        "b1": params["b1"][start:stop].copy(),
        "W2": params["W2"][start:stop, :].copy(),
        "b2": params["b2"].copy(),
    }


def _allreduce(comm, partial: np.ndarray) -> np.ndarray:
    from mpi4py import MPI

    total = np.empty_like(partial)
    comm.Allreduce(np.ascontiguousarray(partial), total, op=MPI.SUM)
    return total


def tp_forward(comm, shard: dict, x: np.ndarray):
    """The block's output ``y`` on every rank, and this rank's cache; one allreduce.

    ``x`` is the whole input, the same on every rank (in a transformer it is the output of the
    previous block, which every rank holds after that block's allreduce).
    """
    z = x @ shard["W1"] + shard["b1"]  # this rank's columns: no communication
    a = gelu(z)
    y = _allreduce(comm, a @ shard["W2"]) + shard["b2"]  # g: sum of the partial products
    return y, {"x": x, "z": z, "a": a}


def tp_backward(comm, shard: dict, cache: dict, dy: np.ndarray):
    """``dx`` on every rank and the gradients of this rank's shard; one allreduce.

    The gradients of ``W1``, ``b1`` and ``W2`` are this rank's slices of the full gradients; the
    gradient of ``b2`` is the whole one, the same on every rank.
    """
    grads = {"W2": cache["a"].T @ dy, "b2": dy.sum(axis=0)}
    dz = (dy @ shard["W2"].T) * gelu_grad(cache["z"])
    grads["W1"] = cache["x"].T @ dz
    grads["b1"] = dz.sum(axis=0)
    dx = _allreduce(comm, dz @ shard["W1"].T)  # backward of f: sum of the partial products
    return dx, grads


def gather_gradients(comm, grads: dict) -> dict:
    """The full gradients, rebuilt on every rank from the shards' (to compare with the reference)."""
    pieces = comm.allgather({k: grads[k] for k in ("W1", "b1", "W2")})
    return {
        "W1": np.concatenate([p["W1"] for p in pieces], axis=1),
        "b1": np.concatenate([p["b1"] for p in pieces]),
        "W2": np.concatenate([p["W2"] for p in pieces], axis=0),
        "b2": grads["b2"],
    }


class CountingComm:
    """A communicator that counts the ``Allreduce`` calls and the bytes each rank contributes.

    Wraps an mpi4py communicator; everything else is passed through. The lesson uses it to show
    that the block communicates once in the forward pass and once in the backward pass.
    """

    def __init__(self, comm):
        self._comm = comm
        self.allreduces = 0
        self.bytes = 0

    def Allreduce(self, send, recv, op=None):  # noqa: N802 (mpi4py's name)
        self.allreduces += 1
        self.bytes += np.asarray(send).nbytes
        return self._comm.Allreduce(send, recv, op=op) if op else self._comm.Allreduce(send, recv)

    def __getattr__(self, name):
        return getattr(self._comm, name)


def compare_with_reference(comm, hidden: int = 8, ffn: int = 16, batch: int = 4, seed: int = 0):
    """Run the split block and the reference on the same data; return what to compare, as a dict.

    Keys: ``max_abs_diff`` (largest difference in ``y``, ``dx`` and every gradient, as
    floats), ``allreduces_forward``, ``allreduces_backward``, ``bytes_forward``, ``bytes_backward``,
    ``shard_params`` and ``full_params`` (number of parameters this rank keeps, ``b2`` included,
    and the block's).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    column_range(ffn, rank, size)  # a clear error before any work
    params = init_mlp(hidden, ffn, seed)
    rng = np.random.default_rng(seed + 1)
    x, dy = rng.standard_normal((batch, hidden)), rng.standard_normal((batch, hidden))
    y_ref, cache_ref = mlp_forward(params, x)
    dx_ref, grads_ref = mlp_backward(params, cache_ref, dy)

    shard = shard_mlp(params, rank, size)
    counting = CountingComm(comm)
    y, cache = tp_forward(counting, shard, x)
    forward, forward_bytes = counting.allreduces, counting.bytes
    dx, grads = tp_backward(counting, shard, cache, dy)
    full = gather_gradients(comm, grads)
    diffs = {"y": np.abs(y - y_ref).max(), "dx": np.abs(dx - dx_ref).max()}
    diffs.update({f"d{k}": np.abs(full[k] - grads_ref[k]).max() for k in grads_ref})
    return {
        "rank": rank,
        "size": size,
        "max_abs_diff": {k: float(v) for k, v in diffs.items()},
        "allreduces_forward": forward,
        "allreduces_backward": counting.allreduces - forward,
        "bytes_forward": forward_bytes,
        "bytes_backward": counting.bytes - forward_bytes,
        "shard_params": int(sum(v.size for v in shard.values())),
        "full_params": int(sum(v.size for v in params.values())),
    }
