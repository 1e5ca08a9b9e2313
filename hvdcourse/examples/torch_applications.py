"""ResNet-50 and MobileNetV2 in PyTorch, the two models of the Horovod-and-Ray benchmark (lesson:
Horovod and Ray Train, side by side).

The layers of torchvision's ``resnet50`` and ``mobilenet_v2`` (He et al. 2016, with the stride on
the 3x3 convolution of a bottleneck as torchvision puts it; Sandler et al. 2018), written out here
so that the course needs no torchvision wheel, whose builds are tied to one torch build each. One
difference: the first convolution takes 1 channel (grey images), not 3. With 10 classes the models
have 23,522,250 and 2,236,106 parameters: torchvision's 23,528,522 and 2,236,682 less the first
convolution's weights for two more input channels (64 x 2 x 7 x 7 and 32 x 2 x 3 x 3).
"""

from __future__ import annotations

from torch import nn


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1, act=None):
    """Convolution without bias ("same" padding), batch norm, then ``act`` (none: no activation)."""
    layers = [
        nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out),
    ]
    return nn.Sequential(*layers, *([act()] if act else []))


class Bottleneck(nn.Module):
    """ResNet's bottleneck: 1x1 down to ``width``, 3x3 (with the stride), 1x1 up to 4 x ``width``,
    plus the input (through a 1x1 projection when the shape changes), then ReLU."""

    def __init__(self, c_in: int, width: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            conv_bn(c_in, width, 1, act=nn.ReLU),
            conv_bn(width, width, 3, stride, act=nn.ReLU),
            conv_bn(width, 4 * width, 1),
        )
        changes = stride != 1 or c_in != 4 * width
        self.shortcut = conv_bn(c_in, 4 * width, 1, stride) if changes else nn.Identity()
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


def resnet50(num_classes: int = 10, channels: int = 1):
    """ResNet-50: a 7x7/2 stem and 3x3/2 max-pool, then 3, 4, 6 and 3 bottlenecks of width 64, 128,
    256 and 512, global average pooling, one linear layer."""
    layers = [conv_bn(channels, 64, 7, 2, act=nn.ReLU), nn.MaxPool2d(3, 2, 1)]
    c_in = 64
    for stage, (blocks, width) in enumerate(((3, 64), (4, 128), (6, 256), (3, 512))):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(Bottleneck(c_in, width, stride))
            c_in = 4 * width
    return nn.Sequential(
        *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, num_classes)
    )


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expansion (none when ``expand`` is 1), 3x3 depthwise with the stride,
    1x1 linear projection; the input is added when the shape is kept."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int):
        super().__init__()
        hidden = c_in * expand
        layers = [conv_bn(c_in, hidden, 1, act=nn.ReLU6)] if expand != 1 else []
        layers += [
            conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
            conv_bn(hidden, c_out, 1),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


# (expansion, output channels, blocks, stride of the first block): the paper's Table 2
MOBILENET_V2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenet_v2(num_classes: int = 10, channels: int = 1):
    """MobileNetV2 (width 1.0): a 3x3/2 stem of 32, the inverted residuals of
    :data:`MOBILENET_V2_BLOCKS`, a 1x1 convolution to 1280, global average pooling, dropout 0.2, one
    linear layer."""
    layers = [conv_bn(channels, 32, 3, 2, act=nn.ReLU6)]
    c_in = 32
    for expand, c_out, blocks, stride in MOBILENET_V2_BLOCKS:
        for block in range(blocks):
            layers.append(InvertedResidual(c_in, c_out, stride if block == 0 else 1, expand))
            c_in = c_out
    layers.append(conv_bn(c_in, 1280, 1, act=nn.ReLU6))
    return nn.Sequential(
        *layers,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(1280, num_classes),
    )
