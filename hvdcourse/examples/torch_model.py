"""The course's MNIST model in PyTorch (lesson: PyTorch with Horovod, and DDP).

The same layers as the Keras model (:mod:`hvdcourse.examples.model`): conv-pool-conv-pool-dense,
16 and 32 filters of 3x3, a 64-unit hidden layer, 10 logits; 28x28 -> 26 -> 13 -> 11 -> 5, so
the first dense layer sees 32 x 5 x 5 = 800 values in both frameworks (PyTorch puts the channel
first: images are N x 1 x 28 x 28).
"""

from __future__ import annotations

import hashlib


def build_model(name: str = "cnn", width: int = 16):
    """The model ``name`` (one of :data:`hvdcourse.examples.model.MODELS`) for 1x28x28 inputs, 10
    classes (logits); ``width``: the CNN's first filters."""
    from torch import nn

    if name != "cnn":
        return build_application(name)

    return nn.Sequential(
        nn.Conv2d(1, width, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * width * 5 * 5, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def build_application(name: str):
    """ResNet-50 or MobileNetV2 behind a layer that pads the 1x28x28 images to 1x32x32."""
    from torch import nn

    from hvdcourse.examples import torch_applications
    from hvdcourse.examples.model import MODELS
    from hvdcourse.runtime.errors import UsageError

    applications = {
        "resnet50": torch_applications.resnet50,
        "mobilenetv2": torch_applications.mobilenet_v2,
    }
    if name not in applications:
        raise UsageError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    return nn.Sequential(nn.ZeroPad2d(2), applications[name](num_classes=10))


def loss_fn():
    """Cross-entropy on logits with integer labels, averaged over the batch (as the Keras loss)."""
    from torch import nn

    return nn.CrossEntropyLoss()


def to_tensors(x, y):
    """uint8 images (N x 28 x 28) and labels -> float32 N x 1 x 28 x 28 in [0, 1], int64 labels."""
    import numpy as np
    import torch

    images = torch.from_numpy((x.astype(np.float32) / 255.0)[:, None, :, :])
    return images, torch.from_numpy(y.astype(np.int64))


def weights_digest(model) -> str:
    """SHA-256 of all weights' bytes (parameters and buffers, in the model's order): equal digests on
    every rank prove bit-identical models."""
    return tensors_digest(model.state_dict().values())


def optimizer_digest(optimizer) -> str:
    """SHA-256 of the optimizer's state: for Adam, each parameter's step count and two moments."""
    import torch

    tensors = []
    for _, state in sorted(optimizer.state_dict()["state"].items()):
        for _, value in sorted(state.items()):
            tensors.append(value if torch.is_tensor(value) else torch.tensor(value))
    return tensors_digest(tensors)


def tensors_digest(tensors) -> str:
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
