"""The course's MNIST model (lesson: Converting a Keras MNIST script to Horovod).

A small CNN in the spirit of Horovod's ``keras_mnist`` example, sized so that an epoch on the
offline data takes seconds on one CPU core. The trainers' ``--model`` also offers the two models of
the Horovod-and-Ray benchmark (lesson: Horovod and Ray Train, side by side), Keras' own definitions
built with ``weights=None`` (nothing is downloaded): ``resnet50`` and ``mobilenetv2``, on the 28x28
images padded with zeros to 32x32, the smallest input these definitions take.
"""

from __future__ import annotations

# the choices of the trainers' --model: the course's CNN, and the benchmark's two models
MODELS = ("cnn", "resnet50", "mobilenetv2")


def build_model(name: str = "cnn", width: int = 16):
    """The model ``name`` (one of :data:`MODELS`) for 28x28x1 inputs, 10 classes (logits);
    ``width``: the CNN's first filters."""
    if name != "cnn":
        return build_application(name)
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


def build_application(name: str):
    """ResNet-50 or MobileNetV2 from ``tf.keras.applications`` (``weights=None``, 10 logits), behind a
    layer that pads the 28x28x1 images to 32x32x1."""
    import tensorflow as tf

    from hvdcourse.runtime.errors import UsageError

    applications = {
        "resnet50": tf.keras.applications.ResNet50,
        "mobilenetv2": tf.keras.applications.MobileNetV2,
    }
    if name not in applications:
        raise UsageError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    inputs = tf.keras.layers.Input(shape=(28, 28, 1))
    padded = tf.keras.layers.ZeroPadding2D(2)(inputs)  # 28 + 2 + 2 = 32
    body = applications[name](
        weights=None, input_shape=(32, 32, 1), classes=10, classifier_activation=None
    )
    return tf.keras.Model(inputs, body(padded), name=name)


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
