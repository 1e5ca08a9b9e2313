"""hvdcourse.course.lessons.model_parallel.zero without MPI: Adam, shards, measured memory."""

import numpy as np
import pytest

from hvdcourse.course.lessons.model_parallel import zero


def test_adam_first_step_moves_every_weight_by_lr_against_its_gradient_sign():
    w = np.zeros(3, dtype=np.float32)
    zero.Adam(3, lr=0.1).step(w, np.array([2.0, -0.5, 1e-3], dtype=np.float32))
    np.testing.assert_allclose(w, [-0.1, 0.1, -0.1], rtol=1e-4)


@pytest.mark.parametrize(
    "n, size, expected", [(1000, 2, 500), (1001, 2, 501), (7, 4, 2), (3, 4, 1)]
)
def test_shards_cover_the_padded_vector(n, size, expected):
    assert zero.shard_length(n, size) == expected


def test_allocated_bytes_sees_numpy_buffers():
    _, size = zero.allocated_bytes(lambda: np.ones(100_000))
    assert 800_000 <= size < 800_000 + 10_000
