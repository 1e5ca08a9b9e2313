"""The course's MNIST model (lesson: Converting a Keras MNIST script to Horovod).

A small CNN in the spirit of Horovod's ``keras_mnist`` example, sized so that an epoch on the
offline data takes seconds on one CPU core.
"""

from __future__ import annotations


def build_model(width: int = 16):
    """Conv-pool-conv-pool-dense classifier for 28x28x1 inputs, 10 classes (logits)."""
    import tensorflow as tf

    layers = tf.keras.layers
    return tf.keras.Sequential(
        [
            layers.Input(shape=(28, 28, 1)),
            layers.Conv2D(width, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(2 * width, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(64, activation="relu"),
            layers.Dense(10),
        ]
    )


def loss_fn():
    """Sparse categorical cross-entropy on logits (labels are integers 0-9)."""
    import tensorflow as tf

    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def weights_digest(model) -> str:
    """SHA-256 of all weights' bytes: equal digests on every rank prove bit-identical models."""
    return variables_digest(model.weights)


def variables_digest(variables) -> str:
    """SHA-256 of the values of ``variables`` (weights, or an optimizer's step count and moments)."""
    import hashlib

    digest = hashlib.sha256()
    for v in variables:
        digest.update(v.numpy().tobytes())
    return digest.hexdigest()
