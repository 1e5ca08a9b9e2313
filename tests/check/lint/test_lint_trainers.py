"""hvdcourse-lint on the course's own trainers: the distributed ones (Keras, a custom loop, Horovod
Elastic, PyTorch with Horovod, DDP; launched by horovodrun, mpirun, srun, torchrun) give no
finding; those of frameworks it does not check (tf.distribute, Ray Train) say so once; the
single-worker ones get what their conversion needs."""

import os

import pytest

from conftest import ROOT
from hvdcourse.course.check.lint.lint import lint_file

EXAMPLES = os.path.join(ROOT, "hvdcourse", "examples")
CHECKED = ["train_hvd", "train_tape", "train_elastic", "train_torch_hvd", "train_torch_ddp"]
OTHERS = {
    "train_mwms": "tf.distribute",
    "train_ray_hvd": "Ray Train",
    "train_ray_tf": "Ray Train",
    "train_ray_torch": "Ray Train",
}


def lint(name):
    return lint_file(os.path.join(EXAMPLES, f"{name}.py"))


def test_every_trainer_is_in_one_list():
    names = {n[:-3] for n in os.listdir(EXAMPLES) if n.startswith("train_") and n.endswith(".py")}
    assert names == set(CHECKED) | set(OTHERS) | {"train_single", "train_torch_single"}


@pytest.mark.parametrize("name", CHECKED)
def test_a_distributed_trainer_of_the_course_gives_no_finding(name):
    assert [f.format() for f in lint(name) if not f.note] == []


@pytest.mark.parametrize("name", ["train_hvd", "train_tape", "train_torch_hvd", "train_torch_ddp"])
def test_a_distributed_trainer_of_the_course_needs_no_note_either(name):
    assert [f.format() for f in lint(name)] == []


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_a_trainer_of_another_framework_gets_one_note_saying_so(name):
    items = lint(name)
    assert not [f for f in items if not f.note]
    framework = [f for f in items if f.rule == "framework"]
    assert len(framework) == 1 and OTHERS[name] in framework[0].what


CONVERSION = {
    "missing-init",
    "unwrapped-optimizer",
    "missing-broadcast",
    "unscaled-lr",
    "unsharded-data",
    "unscaled-steps",
    "every-rank-checkpoints",
    "every-rank-logs",
}


@pytest.mark.parametrize(
    "name, more",
    [("train_single", set()), ("train_torch_single", {"device-rank"})],  # torch.device("cuda")
)
def test_a_single_worker_trainer_gets_every_step_of_its_conversion(name, more):
    assert {f.rule for f in lint(name) if not f.note} == CONVERSION | more
