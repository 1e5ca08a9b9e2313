"""hvdcourse.gradients: averaged equal-shard gradients are the full-batch gradient; unequal shards need weights."""
import numpy as np
import pytest

from hvdcourse import gradients


@pytest.fixture(scope="module")
def model_and_batch():
    import tensorflow as tf

    from hvdcourse.model import build_model

    tf.keras.utils.set_random_seed(1)
    rng = np.random.default_rng(1)
    x = rng.random((24, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, size=24).astype(np.int32)
    return build_model(width=4), x, y


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_average_of_equal_shard_gradients_is_the_full_batch_gradient(model_and_batch, workers):
    model, x, y = model_and_batch
    check = gradients.check_data_parallel_gradient(model, x, y, workers=workers)
    assert check.match and check.relative_difference < 1e-5


def test_plain_average_of_unequal_shards_is_wrong(model_and_batch):
    model, x, y = model_and_batch
    check = gradients.check_data_parallel_gradient(model, x, y, sizes=[20, 4])
    assert not check.match and check.relative_difference > 1e-3


def test_weighted_average_of_unequal_shards_is_right(model_and_batch):
    model, x, y = model_and_batch
    assert gradients.check_data_parallel_gradient(model, x, y, sizes=[20, 4], weighted=True).match


def test_weighted_average_uses_shares_of_the_samples():
    per_worker = [[np.array([1.0, 2.0])], [np.array([3.0, 6.0])]]
    np.testing.assert_allclose(gradients.average(per_worker, weights=[3, 1])[0], [1.5, 3.0])
    np.testing.assert_allclose(gradients.average(per_worker)[0], [2.0, 4.0])


def test_equal_split_refuses_a_remainder():
    with pytest.raises(ValueError, match="equal shards"):
        gradients.split_sizes(10, 3)


def test_shard_sizes_must_cover_the_batch(model_and_batch):
    model, x, y = model_and_batch
    with pytest.raises(ValueError, match="add up to"):
        gradients.shard_gradients(model, x, y, [10, 10])
