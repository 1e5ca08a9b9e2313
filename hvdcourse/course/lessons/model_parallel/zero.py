"""ZeRO stage 1: Adam's state sharded over the data-parallel ranks (lesson: Model parallelism by hand).

Plain data parallelism (Horovod's) keeps on every rank the weights, the gradients and the whole
optimizer state: with Adam, two more arrays (first and second moments) as large as the weights.
ZeRO stage 1 (Rajbhandari et al. 2020, "ZeRO", arXiv:1910.02054) cuts the flat vector of parameters
into N shards and lets rank r keep Adam's moments of shard r only:

1. **reduce-scatter** of the gradients: rank r receives the sum of shard r of every rank's gradient
   (the first half of a ring allreduce);
2. rank r runs Adam on shard r of the weights, with its shard of the moments;
3. **allgather** of the updated shards: every rank has all the new weights (the second half).

It sends what an allreduce sends, and the update is the same as plain data parallelism's, element by
element; the optimizer state per rank drops from 2P to 2P/N numbers. Stage 2 shards the gradients
as well, stage 3 (and PyTorch's FSDP) the weights too.
"""

from __future__ import annotations

import tracemalloc

import numpy as np


class Adam:
    """Adam (Kingma & Ba 2015) on a flat vector of ``n`` parameters, updated in place."""

    def __init__(
        self, n: int, lr: float = 1e-2, beta1=0.9, beta2=0.999, eps=1e-8, dtype=np.float32
    ):
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = np.zeros(n, dtype=dtype)
        self.v = np.zeros(n, dtype=dtype)
        self.t = 0

    def step(self, param: np.ndarray, grad: np.ndarray) -> None:
        self.t += 1
        self.m *= self.beta1
        self.m += (1 - self.beta1) * grad
        self.v *= self.beta2
        self.v += (1 - self.beta2) * grad * grad
        m_hat = self.m / (1 - self.beta1**self.t)
        v_hat = self.v / (1 - self.beta2**self.t)
        param -= (self.lr * m_hat / (np.sqrt(v_hat) + self.eps)).astype(param.dtype)

    def state_bytes(self) -> int:
        """Bytes of the moments this optimizer keeps."""
        return self.m.nbytes + self.v.nbytes


def shard_length(n: int, size: int) -> int:
    """Elements per shard: ``n`` rounded up to a multiple of ``size``, divided by ``size``."""
    return -(-n // size)


class DataParallelAdam:
    """Plain data parallelism: allreduce the gradients, average, Adam on all parameters everywhere."""

    def __init__(self, comm, n: int, **adam):
        self.comm, self.size = comm, comm.Get_size()
        self.adam = Adam(n, **adam)

    def step(self, params: np.ndarray, grad: np.ndarray) -> None:
        from mpi4py import MPI

        total = np.empty_like(grad)
        self.comm.Allreduce(grad, total, op=MPI.SUM)
        self.adam.step(params, total / self.size)

    def state_bytes(self) -> int:
        return self.adam.state_bytes()


class Zero1Adam:
    """ZeRO-1: reduce-scatter the gradients, Adam on this rank's shard, allgather the weights.

    The flat vector is padded with zeros to ``shard_length * size`` elements so that every shard
    has the same length (what ``Reduce_scatter_block`` and ``Allgather`` need); the padding's
    gradient is zero and its weights are dropped after the allgather.
    """

    def __init__(self, comm, n: int, **adam):
        self.comm, self.n = comm, n
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.shard = shard_length(n, self.size)
        self.adam = Adam(self.shard, **adam)

    def _padded(self, flat: np.ndarray) -> np.ndarray:
        out = np.zeros(self.shard * self.size, dtype=flat.dtype)
        out[: self.n] = flat
        return out

    def step(self, params: np.ndarray, grad: np.ndarray) -> None:
        from mpi4py import MPI

        mine = np.empty(self.shard, dtype=grad.dtype)
        self.comm.Reduce_scatter_block(self._padded(grad), mine, op=MPI.SUM)
        weights = self._padded(params)
        lo = self.rank * self.shard
        piece = weights[lo : lo + self.shard].copy()
        self.adam.step(piece, mine / self.size)
        self.comm.Allgather(piece, weights)
        params[:] = weights[: self.n]

    def state_bytes(self) -> int:
        return self.adam.state_bytes()


def allocated_bytes(make) -> tuple:
    """``(object, bytes)``: what ``make()`` returns and the memory it left allocated, measured.

    Measured with :mod:`tracemalloc`, which sees NumPy's array buffers as well as Python objects.
    """
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make()
        return made, tracemalloc.get_traced_memory()[0] - before
    finally:
        if started:
            tracemalloc.stop()


def local_problem(rank: int, n: int, samples: int = 32, seed: int = 0):
    """Rank ``rank``'s shard of a least-squares problem with ``n`` weights: ``(X, y)``, float32."""
    rng = np.random.default_rng(seed + 1000 * (rank + 1))
    x = rng.standard_normal((samples, n)).astype(np.float32)
    truth = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
    return x, (x @ truth + 0.1 * rng.standard_normal(samples)).astype(np.float32)


def local_gradient(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradient of half the mean squared error of ``x @ w`` against ``y``."""
    return (x.T @ (x @ w - y) / len(y)).astype(w.dtype)


def compare_with_data_parallel(comm, n: int = 1001, steps: int = 5, seed: int = 0) -> dict:
    """Train the same problem with plain data parallelism and with ZeRO-1; return what to compare.

    Keys: ``max_abs_diff`` (after each step, between the two runs' weights), ``ranks_agree`` (every
    rank holds the same ZeRO-1 weights at the end), ``state_bytes`` and ``state_bytes_measured``
    (optimizer state of this rank, counted from its arrays and measured with tracemalloc, for
    ``"data parallel"`` and ``"zero1"``) and ``parameters``.
    """
    rank = comm.Get_rank()
    x, y = local_problem(rank, n, seed=seed)
    w0 = np.zeros(n, dtype=np.float32)
    plain, plain_bytes = allocated_bytes(lambda: DataParallelAdam(comm, n))
    zero, zero_bytes = allocated_bytes(lambda: Zero1Adam(comm, n))
    w_plain, w_zero, diffs = w0.copy(), w0.copy(), []
    for _ in range(steps):
        plain.step(w_plain, local_gradient(w_plain, x, y))
        zero.step(w_zero, local_gradient(w_zero, x, y))
        diffs.append(float(np.abs(w_plain - w_zero).max()))
    everyone = comm.allgather(w_zero)
    return {
        "rank": rank,
        "size": comm.Get_size(),
        "parameters": n,
        "max_abs_diff": diffs,
        "ranks_agree": all(np.array_equal(everyone[0], w) for w in everyone),
        "state_bytes": {"data parallel": plain.state_bytes(), "zero1": zero.state_bytes()},
        "state_bytes_measured": {"data parallel": plain_bytes, "zero1": zero_bytes},
    }
