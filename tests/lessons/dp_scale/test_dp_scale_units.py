"""hvdcourse.course.lessons.dp_scale in one process: learning-rate rules, warm-up, payload and ring bytes,
the mixed-precision model and a short training."""

import math

import numpy as np
import pytest

from hvdcourse.course.lessons.dp_scale import compression, short_runs
from hvdcourse.runtime.errors import UsageError


def test_linear_rule_scales_with_the_batch_and_sqrt_with_its_square_root():
    assert short_runs.scaled_lr("none", 0.02, 64, 1024) == 0.02
    assert short_runs.scaled_lr("linear", 0.02, 64, 1024) == pytest.approx(0.32)
    assert short_runs.scaled_lr("linear+warmup", 0.02, 64, 1024) == pytest.approx(0.32)
    assert short_runs.scaled_lr("sqrt", 0.02, 64, 1024) == pytest.approx(0.08)


def test_an_unknown_rule_names_the_known_ones():
    with pytest.raises(UsageError, match="linear, sqrt"):
        short_runs.scaled_lr("cubic", 0.1, 32, 64)


def test_warmup_rises_linearly_then_stays_at_the_target():
    lrs = [short_runs.warmup_lr(s, 0.1, 0.5, 4) for s in range(6)]
    assert lrs == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5, 0.5])
    assert short_runs.warmup_lr(0, 0.1, 0.5, 0) == 0.5


def test_keras_warmup_schedule_gives_the_same_rates():
    schedule = short_runs.warmup_schedule(0.1, 0.5, 4)
    got = [float(schedule(s)) for s in range(6)]
    assert got == pytest.approx([short_runs.warmup_lr(s, 0.1, 0.5, 4) for s in range(6)])


def test_fp16_payload_is_half_of_none_and_the_ring_sends_2_n_minus_1_over_n():
    import horovod.tensorflow as hvd

    shapes = [(3, 5), (7,)]
    assert compression.payload_bytes(shapes, hvd.Compression.none) == 4 * 22
    assert compression.payload_bytes(shapes, hvd.Compression.fp16) == 2 * 22
    assert compression.ring_bytes_per_rank(100, 2) == 100
    assert compression.ring_bytes_per_rank(100, 4) == 150


def test_gradient_shapes_are_the_trainable_weights_shapes():
    model = short_runs.build()
    shapes = compression.gradient_shapes(model)
    assert shapes[0] == (3, 3, 1, 16) and shapes[-1] == (10,)
    assert sum(math.prod(s) for s in shapes) == model.count_params()


def test_mixed_bfloat16_model_computes_in_bfloat16_keeps_float32_weights_and_logits():
    import tensorflow as tf

    model = short_runs.build("mixed_bfloat16")
    assert tf.keras.mixed_precision.global_policy().name == "float32"  # restored
    inner = model.layers[0]
    assert inner.layers[0].compute_dtype == "bfloat16"
    assert all(w.dtype == tf.float32 for w in model.trainable_weights)
    assert model(np.zeros((2, 28, 28, 1), np.float32)).dtype == tf.float32


def test_the_same_seed_builds_the_same_weights():
    from hvdcourse.examples.model import weights_digest

    assert weights_digest(short_runs.build(seed=3)) == weights_digest(short_runs.build(seed=3))


def test_a_short_single_process_training_learns_and_reports_its_steps():
    run = short_runs.short_training(batch_size=32, lr=0.05, max_steps=20)
    assert run["steps"] == 20 and run["global_batch"] == 32
    assert run["accuracy"] > 0.3  # 10 classes: chance is 0.1
    assert run["step_time"] > 0 and len(run["weights_sha256"]) == 64


def test_a_batch_larger_than_the_shard_is_refused():
    with pytest.raises(UsageError, match="larger than this rank's"):
        short_runs.short_training(batch_size=100_000)


def test_the_perceptron_is_much_smaller_than_the_cnn_and_unknown_models_are_refused():
    assert short_runs.build(model="mlp").count_params() == 784 * 64 + 64 + 64 * 10 + 10
    with pytest.raises(UsageError, match="cnn, mlp"):
        short_runs.build(model="resnet")


def test_lr_rule_runs_train_the_base_once_and_every_rule_at_the_larger_batches():
    rows = short_runs.lr_rule_runs(None, global_batches=(2000, 4000), base_lr=0.01, epochs=1)
    assert [(r["global_batch"], r["rule"]) for r in rows] == [(2000, "base")] + [
        (4000, rule) for rule in short_runs.RULES
    ]
    lrs = {r["rule"]: r["lr"] for r in rows}
    assert lrs["linear"] == pytest.approx(0.02) and lrs["sqrt"] == pytest.approx(0.01 * 2**0.5)
    images = len(short_runs.load_data()[0])
    assert all(r["steps"] == images // r["global_batch"] for r in rows)
