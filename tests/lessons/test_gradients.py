"""hvdcourse.course.lessons.gradients: averaged equal-shard gradients are the full-batch gradient; unequal shards need weights."""

import numpy as np
import pytest

from hvdcourse.course.lessons import gradients


@pytest.fixture(scope="module")
def model_and_batch():
    import tensorflow as tf

    from hvdcourse.examples.model import build_model

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


def test_quadrant_features_are_the_mean_grey_of_each_quarter():
    image = np.zeros((1, 28, 28), dtype=np.uint8)
    image[0, :14, 14:] = 255  # top right quarter white
    np.testing.assert_allclose(gradients.quadrant_features(image), [[0.0, 1.0, 0.0, 0.0]])


def test_batch_norm_check_refuses_a_batch_without_variance():
    with pytest.raises(SystemExit):
        gradients.main(["--per-rank-batch", "1"])


def test_batch_norm_uses_each_ranks_statistics_and_sync_batch_norm_the_global_ones():
    from conftest import PYTHON
    from hvdcourse.runtime.launch import run_ranks

    run = run_ranks(
        [PYTHON, "-m", "hvdcourse.course.lessons.gradients", "--per-rank-batch", "4"],
        np=2,
        launcher="gloo",
        timeout=240,
    )
    assert run.ok, run.output[-3000:]
    reports = [found[0] for found in run.results]  # one batch size: one report per rank
    assert [r["rank"] for r in reports] == [0, 1]
    for r in reports:
        np.testing.assert_allclose(r["bn_moving_mean"], r["own_mean"], rtol=1e-5)
        np.testing.assert_allclose(r["bn_moving_var"], r["own_var"], rtol=1e-4)
        np.testing.assert_allclose(r["sync_moving_mean"], r["global_mean"], rtol=1e-5)
        np.testing.assert_allclose(r["sync_moving_var"], r["global_var"], rtol=1e-4)
    assert not np.allclose(reports[0]["own_mean"], reports[1]["own_mean"])
