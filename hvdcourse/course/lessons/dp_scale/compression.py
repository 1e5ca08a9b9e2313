"""Gradient compression with ``hvd.Compression.fp16`` (lesson: Data parallelism at scale).

Horovod's compressor casts every float32 gradient to float16 before the allreduce and back after
it: half the bytes travel, at the cost of two casts and of float16's precision (about 3 decimal
digits, and nothing above 65504). :func:`payload_bytes` measures what the allreduce is given (the
compressed tensors' own sizes); :func:`time_allreduces` times the allreduce of a list of gradient
shapes, with and without compression.
"""

from __future__ import annotations

import time

import numpy as np

# ResNet-50's 25.6 million parameters, as 50 equal float32 tensors: a gradient of the size
# Horovod's papers and benchmarks allreduce (about 100 MB)
RESNET50_LIKE = [(512_000,)] * 50


def gradient_shapes(model) -> list:
    """The shapes of a Keras model's trainable weights: those of its gradients."""
    return [tuple(int(d) for d in w.shape) for w in model.trainable_weights]


def payload_bytes(shapes, compression) -> int:
    """Bytes the allreduce is handed for float32 gradients of ``shapes`` after ``compression``."""
    import tensorflow as tf

    total = 0
    for shape in shapes:
        compressed, _ = compression.compress(tf.zeros(shape, dtype=tf.float32))
        total += int(np.prod(shape)) * compressed.dtype.size
    return total


def ring_bytes_per_rank(payload: int, size: int) -> float:
    """Bytes each rank sends in a ring allreduce of ``payload`` bytes: ``2 (N-1)/N`` of it."""
    return 2 * (size - 1) / size * payload


def time_allreduces(shapes, compression, repeats: int = 5, seed: int = 0) -> dict:
    """Median seconds of one ``hvd.grouped_allreduce`` of float32 tensors of ``shapes`` (one warm-up
    first; Horovod initialised), and the largest difference of the result to the exact float64 average (first 4 tensors)."""
    import horovod.tensorflow as hvd  # the Keras flavour has no grouped_allreduce; same runtime
    import tensorflow as tf

    rng = np.random.default_rng(seed + hvd.rank())
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    tensors = [tf.constant(a) for a in arrays]
    times, result = [], None
    for i in range(repeats + 1):
        start = time.perf_counter()
        result = hvd.grouped_allreduce(tensors, compression=compression, name=f"timed_{i}")
        _ = [r.numpy() for r in result]
        if i:
            times.append(time.perf_counter() - start)
    exact = [
        hvd.allreduce(tf.constant(a, dtype=tf.float64), name=f"exact_{j}").numpy()
        for j, a in enumerate(arrays[:4])
    ]
    error = max(float(np.max(np.abs(r.numpy() - e))) for r, e in zip(result[:4], exact))
    return {
        "seconds": float(np.median(times)),
        "max_abs_error": error,
        "payload": payload_bytes(shapes, compression),
    }
