"""hvdcourse.course.lessons.model_parallel.tensor_parallel without MPI: the reference block and the split."""

import numpy as np
import pytest

from hvdcourse.course.lessons.model_parallel import tensor_parallel as tp
from hvdcourse.runtime.errors import UsageError


def test_gelu_gradient_matches_finite_differences():
    z = np.linspace(-4, 4, 41)
    eps = 1e-6
    numeric = (tp.gelu(z + eps) - tp.gelu(z - eps)) / (2 * eps)
    np.testing.assert_allclose(tp.gelu_grad(z), numeric, rtol=1e-6, atol=1e-9)


def test_reference_backward_matches_finite_differences():
    params = tp.init_mlp(3, 4, seed=5)
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))
    y, cache = tp.mlp_forward(params, x)
    _, grads = tp.mlp_backward(params, cache, dy)
    eps = 1e-6
    for name, index in [("W1", (2, 1)), ("b1", (3,)), ("W2", (0, 2)), ("b2", (1,))]:
        params[name][index] += eps
        up = float((tp.mlp_forward(params, x)[0] * dy).sum())
        params[name][index] -= 2 * eps
        down = float((tp.mlp_forward(params, x)[0] * dy).sum())
        params[name][index] += eps
        assert grads[name][index] == pytest.approx((up - down) / (2 * eps), rel=1e-5), name


def test_shards_put_back_together_are_the_whole_block():
    params = tp.init_mlp(4, 8)
    shards = [tp.shard_mlp(params, r, 2) for r in range(2)]
    np.testing.assert_array_equal(np.concatenate([s["W1"] for s in shards], axis=1), params["W1"])
    np.testing.assert_array_equal(np.concatenate([s["W2"] for s in shards], axis=0), params["W2"])
    assert all(np.array_equal(s["b2"], params["b2"]) for s in shards)


def test_partial_products_of_the_shards_add_up_to_the_block_output():
    params = tp.init_mlp(4, 8)
    x = np.random.default_rng(1).standard_normal((3, 4))
    partial = [
        tp.gelu(x @ s["W1"] + s["b1"]) @ s["W2"]
        for s in (tp.shard_mlp(params, r, 2) for r in range(2))
    ]
    np.testing.assert_allclose(sum(partial) + params["b2"], tp.mlp_forward(params, x)[0])


def test_inner_size_not_divisible_by_ranks_is_a_usage_error_saying_what_to_do():
    with pytest.raises(
        UsageError, match="inner size 10 is not divisible by 4 ranks.*multiple of 4"
    ):
        tp.shard_mlp(tp.init_mlp(4, 10), 0, 4)
