"""A parameter-server step written with mpi4py, and asynchronous SGD with stale gradients, simulated
(lesson: Parameter servers and ring-allreduce).

:func:`parameter_server_allreduce` is one synchronous step of the centralized design: every worker
pushes its gradient to one server rank, the server sums them and sends the sum back (the pull). All
of it goes through the server's link, one message at a time: 2W messages of n bytes for W workers,
the ``parameter_server_time`` of :mod:`hvdcourse.course.lessons.ring` (W = N - 1 workers on N ranks).

:func:`stale_sgd` simulates what a parameter server also allows and the Introduction to Horovod slides warn about:
asynchronous SGD, where a worker's gradient reaches the server after other workers' updates, so
it was computed on weights ``delay`` updates old. Softmax regression on MNIST, NumPy only; delay 0 is
synchronous SGD.

Check the step on 3 ranks (a server and 2 workers):
``mpirun -np 3 python -m hvdcourse.course.lessons.parameter_server --length 10``.
"""

from __future__ import annotations

import argparse
import functools
import sys

import numpy as np

from hvdcourse.runtime.errors import UsageError, run_cli

PUSH, PULL = 11, 12  # message tags of the two phases


def parameter_server_allreduce(comm, array, server: int = 0) -> np.ndarray:
    """The sum of the workers' ``array`` (every rank of ``comm`` but ``server``), on every rank.

    Workers ``Send`` their array to the server (push) and ``Recv`` the sum (pull). The server
    receives the pushes in rank order, adds each to its running sum (so the result is exactly
    ``((g_1 + g_2) + g_3) + ...``), then sends the sum to every worker. The server's own ``array``
    only gives the shape and dtype: it computes no gradient. Every rank gets a new array.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        raise UsageError(
            "a parameter-server step needs at least 2 ranks, a server and a worker: run it with "
            "mpirun -np 2 or more"
        )
    if not 0 <= server < size:
        raise UsageError(f"the server rank {server} is outside this job's ranks 0..{size - 1}")
    source = np.asarray(array)
    flat = np.ascontiguousarray(source).reshape(-1)
    workers = [r for r in range(size) if r != server]
    if rank == server:
        total = np.zeros_like(flat)
        incoming = np.empty_like(flat)
        for worker in workers:  # many-to-one: the pushes queue at the server's link
            comm.Recv(incoming, source=worker, tag=PUSH)
            total += incoming
        pulls = [comm.Isend(total, dest=worker, tag=PULL) for worker in workers]  # one-to-many
        for request in pulls:
            request.Wait()
        return total.reshape(source.shape)
    comm.Send(flat, dest=server, tag=PUSH)
    total = np.empty_like(flat)
    comm.Recv(total, source=server, tag=PULL)
    return total.reshape(source.shape)


# --------------------------------------------------------------------------- stale gradients


def _softmax(logits: np.ndarray) -> np.ndarray:
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def _cross_entropy(p: np.ndarray, y: np.ndarray) -> float:
    return float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())


def _gradient(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradient in w of the mean cross-entropy of softmax(x @ w) against the labels y."""
    p = _softmax(x @ w)
    p[np.arange(len(y)), y] -= 1
    return x.T @ p / len(y)


def mnist_features(limit: int | None = None):
    """The course's MNIST as (x_train, y_train, x_test, y_test): pixels in [0, 1] plus a bias column."""
    from hvdcourse.examples.data import load_mnist

    data = load_mnist(quiet=True)

    def features(images):
        flat = images[:limit].reshape(len(images[:limit]), -1).astype(np.float32) / 255.0
        return np.hstack([flat, np.ones((len(flat), 1), np.float32)])

    return (
        features(data.x_train),
        data.y_train[:limit].astype(int),
        features(data.x_test),
        data.y_test[:limit].astype(int),
    )


def stale_sgd(
    data,
    delay: int,
    steps: int = 600,
    lr: float = 0.1,
    batch_size: int = 32,
    eval_every: int = 20,
    seed: int = 0,
) -> dict:
    """Softmax regression trained by SGD whose gradients arrive ``delay`` updates late.

    Update t applies the gradient of batch t computed on the weights of update ``t - delay`` (the
    weights a worker pulled before ``delay`` other workers pushed theirs): with W workers taking
    turns, ``delay = W - 1``. ``delay = 0`` is synchronous SGD. Same batches, same learning rate
    for every delay: only the staleness differs. Returns ``steps`` (the update numbers where the test
    set was evaluated), ``test_loss`` and ``test_accuracy`` there (a diverged run gives inf).
    """
    if delay < 0 or steps < 1 or batch_size < 1 or eval_every < 1:
        raise UsageError(
            f"need delay >= 0 and steps, batch_size, eval_every >= 1, not {delay}, {steps}, {batch_size}, {eval_every}"
        )
    x_train, y_train, x_test, y_test = data
    rng = np.random.default_rng(seed)
    w = np.zeros((x_train.shape[1], 10), x_train.dtype)
    history = [w]  # the weights after each of the last delay + 1 updates (never changed in place)
    out = {"delay": delay, "steps": [], "test_loss": [], "test_accuracy": []}
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(steps + 1):
            if t % eval_every == 0:
                logits = x_test @ w
                loss = _cross_entropy(_softmax(logits), y_test)
                accuracy = float((logits.argmax(axis=1) == y_test).mean())
                out["steps"].append(t)
                out["test_loss"].append(loss if np.isfinite(loss) else float("inf"))
                out["test_accuracy"].append(accuracy)
            if t == steps:
                break
            batch = rng.integers(0, len(x_train), batch_size)
            grad = _gradient(history[0], x_train[batch], y_train[batch])
            w = w - lr * grad
            history.append(w)
            if len(history) > delay + 1:
                history.pop(0)
    return out


def steps_to_reach(run: dict, loss: float) -> int | None:
    """The first evaluated update at which the test loss is at most ``loss`` (None: never)."""
    return next((t for t, value in zip(run["steps"], run["test_loss"]) if value <= loss), None)


# --------------------------------------------------------------------------- command line check


def rank_data(rank: int, length: int) -> np.ndarray:
    """Deterministic float32 gradient of rank ``rank`` (every rank can compute every other rank's)."""
    return np.random.default_rng(2000 + rank).standard_normal(length).astype(np.float32)


def main(argv=None) -> int:
    """Check parameter_server_allreduce on the ranks of this MPI job: the sum, bit for bit."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--length", type=int, default=10, help="elements per rank (default 10)")
    parser.add_argument("--server", type=int, default=0, help="the server's rank (default 0)")
    args = parser.parse_args(argv)
    if args.length < 0:
        raise UsageError(f"--length must be at least 0, not {args.length}")
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    ours = parameter_server_allreduce(comm, rank_data(rank, args.length), server=args.server)
    workers = [rank_data(r, args.length) for r in range(size) if r != args.server]
    exact = bool(np.array_equal(ours, functools.reduce(np.add, workers)))
    sys.stdout.write(f"[ps] rank={rank} size={size} length={args.length} exact={exact}\n")
    sys.stdout.flush()
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(run_cli(main))
