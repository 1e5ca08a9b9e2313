"""The trainers' ``--model`` (hvdcourse/examples/model.py, torch_model.py, torch_applications.py): the
course's CNN, or the Horovod-and-Ray benchmark's ResNet-50 and MobileNetV2 on 28x28 images padded to
32x32, in Keras and in PyTorch."""

import pytest

from hvdcourse.examples import cli, model, torch_model
from hvdcourse.runtime.errors import UsageError

# parameters with 1 input channel and 10 classes: Keras counts its batch norms' moving statistics and
# its convolutions' biases; PyTorch's are torchvision's 23,528,522 and 2,236,682 less the first
# convolution's weights for 2 more input channels
KERAS_PARAMS = {"resnet50": 23_601_930, "mobilenetv2": 2_270_218}
TORCH_PARAMS = {"resnet50": 23_522_250, "mobilenetv2": 2_236_106}


@pytest.mark.parametrize("name", ["resnet50", "mobilenetv2"])
def test_a_keras_source_model_takes_28x28_images_and_gives_10_logits(name):
    built = model.build_model(name)
    assert (built.input_shape, built.output_shape) == ((None, 28, 28, 1), (None, 10))
    assert built.layers[1].output_shape == (None, 32, 32, 1)  # padded to the models' minimum
    assert built.count_params() == KERAS_PARAMS[name]


@pytest.mark.parametrize("name", ["resnet50", "mobilenetv2"])
def test_a_pytorch_source_model_has_torchvisions_layers_for_grey_images(name):
    import torch

    built = torch_model.build_model(name)
    assert sum(p.numel() for p in built.parameters()) == TORCH_PARAMS[name]
    assert isinstance(built[0], torch.nn.ZeroPad2d) and built[0].padding == (2, 2, 2, 2)


def test_one_pytorch_mobilenetv2_step_changes_the_weights_and_gives_a_finite_loss():
    import torch

    torch.manual_seed(0)
    net = torch_model.build_model("mobilenetv2")
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    before = torch_model.weights_digest(net)
    loss = torch_model.loss_fn()(net(torch.rand(4, 1, 28, 28)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss) and torch_model.weights_digest(net) != before


def test_the_default_is_still_the_course_cnn():
    assert torch_model.build_model().__class__.__name__ == "Sequential"
    assert sum(p.numel() for p in torch_model.build_model().parameters()) == 56_714


@pytest.mark.parametrize("build", [model.build_model, torch_model.build_model])
def test_an_unknown_model_says_which_ones_exist(build):
    with pytest.raises(UsageError, match="resnet50, mobilenetv2"):
        build("vgg16")


def test_only_the_comparisons_trainers_take_model():
    chosen = cli.training_parser("x", models=True).parse_args(["--model", "mobilenetv2"])
    assert chosen.model == "mobilenetv2"
    assert cli.training_parser("x", models=True).parse_args([]).model == "cnn"
    with pytest.raises(SystemExit):
        cli.training_parser("x").parse_args(["--model", "resnet50"])
