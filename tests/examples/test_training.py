"""hvdcourse.examples.training: the data order a resumed run needs, and the state a checkpoint shares."""

import numpy as np
import pytest

from hvdcourse.examples import training

X = np.arange(40, dtype=np.float32).reshape(40, 1)
Y = np.arange(40, dtype=np.int64)
BATCH = 8  # 5 batches per pass


def labels(dataset, count):
    return [batch[1].numpy().tolist() for batch in dataset.take(count)]


def test_a_stream_started_at_step_k_is_the_uninterrupted_stream_from_step_k():
    whole = labels(training.train_dataset(X, Y, BATCH, seed=7), 17)
    for k in (1, 5, 7, 12):
        assert (
            labels(training.train_dataset(X, Y, BATCH, seed=7, start_step=k), 17 - k) == whole[k:]
        )


def test_every_pass_is_a_new_order_of_all_examples():
    first, second = (
        sum(labels(training.train_dataset(X, Y, BATCH, seed=7, start_step=s), 5), [])
        for s in (0, 5)
    )
    assert sorted(first) == sorted(second) == list(range(40))
    assert first != second


def test_the_order_depends_on_the_seed():
    assert labels(training.train_dataset(X, Y, BATCH, seed=7), 5) != labels(
        training.train_dataset(X, Y, BATCH, seed=8), 5
    )


def test_a_batch_larger_than_the_data_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="smaller --batch-size"):
        training.train_dataset(X, Y, 64, seed=7)


def test_checkpoint_variables_hold_weights_moments_step_count_and_learning_rate(tmp_path):
    import tensorflow as tf

    from hvdcourse.examples.model import build_model

    model = build_model(width=2)
    optimizer = tf.keras.optimizers.Adam(learning_rate=1e-3)
    optimizer.build(model.trainable_variables)
    shared = training.EpochCheckpoint(str(tmp_path), model, optimizer).variables
    ids = {id(v) for v in shared}
    assert all(id(v) in ids for v in model.variables)
    # step count and Adam's 2 moments per weight
    assert all(id(v) in ids for v in optimizer.variables)
    assert len(optimizer.variables) == 1 + 2 * len(model.trainable_variables)
    assert id(optimizer._learning_rate) in ids
