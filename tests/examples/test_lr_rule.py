"""One learning-rate rule across the course: the rule the trainers use (``training.scaled_lr``), the rule
the exercise checks grade (``common.adam_lr_verdict``, exercise 6's SGD target) and the rule the lessons
teach (lesson 5's box, linked from the others) are the same: linear for SGD, square root for Adam."""

import glob
import os
import re

import pytest

from conftest import ROOT
from hvdcourse.course.lessons import conversion_lab
from hvdcourse.course.lessons.dp_scale import short_runs
from hvdcourse.course.exercises import checks_torch, checks_training
from hvdcourse.course.exercises.common import adam_lr_verdict
from hvdcourse.examples.training import scaled_lr
from hvdcourse.runtime.errors import UsageError

BASE = 1e-3
# every script that trains with more than one worker, and the course code that builds such an optimizer
DISTRIBUTED = sorted(
    set(glob.glob(os.path.join(ROOT, "hvdcourse", "examples", "train_*.py")))
    - set(glob.glob(os.path.join(ROOT, "hvdcourse", "examples", "train_*single.py")))
) + [
    os.path.join(ROOT, "hvdcourse", "course", path)
    for path in (
        "check/gpu.py",
        "lessons/conversion_lab.py",
        "bench/throughput.py",
        "bench/torch_throughput.py",
    )
]
# a rate multiplied by the number of workers, written out instead of asking scaled_lr
HAND_SCALED = re.compile(
    r"^(?=[^#\n]*(?:\blr\b|learning_rate|Adam\(|SGD\())[^#\n]*\*\s*"
    r"(?:hvd\.size\(\)|self\.size|size|workers|num_workers)(?![\w.(])(?!\s*\*\*)",
    re.M,
)


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return fh.read()


def test_scaled_lr_is_linear_for_sgd_and_square_root_for_adam():
    assert scaled_lr(BASE, 4, "sgd") == pytest.approx(4e-3)
    assert scaled_lr(BASE, 4, "adam") == pytest.approx(2e-3)
    assert scaled_lr(BASE, 2) == pytest.approx(
        BASE * 2**0.5
    )  # the trainers' optimizer, Adam, by default
    assert scaled_lr(BASE, 1, "adam") == BASE


def test_scaled_lr_refuses_an_optimizer_it_has_no_rule_for():
    with pytest.raises(UsageError, match="no learning-rate rule for optimizer 'lamb'"):
        scaled_lr(BASE, 2, "lamb")


@pytest.mark.parametrize("path", DISTRIBUTED, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_distributed_trainer_takes_its_rate_from_scaled_lr(path):
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    if re.search(
        r"optimizers?\.(Adam|SGD)\(|optim\.(Adam|SGD)\(", source
    ):  # it builds its optimizer
        assert "scaled_lr(" in source
    assert not HAND_SCALED.findall(source), HAND_SCALED.findall(source)


def test_the_compared_rules_of_the_lessons_measurements_are_the_helpers():
    assert conversion_lab.scaled_lr("sqrt-scaled", BASE, 2) == pytest.approx(
        scaled_lr(BASE, 2, "adam")
    )
    assert conversion_lab.scaled_lr("scaled", BASE, 2) == pytest.approx(scaled_lr(BASE, 2, "sgd"))
    assert short_runs.scaled_lr("sqrt", 0.01, 32, 128) == pytest.approx(scaled_lr(0.01, 4, "adam"))
    assert short_runs.scaled_lr("linear", 0.01, 32, 128) == pytest.approx(scaled_lr(0.01, 4, "sgd"))


def test_the_adam_checks_accept_the_lessons_rule_with_or_without_warm_up():
    want = scaled_lr(BASE, 2, "adam")
    assert adam_lr_verdict([want] * 3, BASE, 2)[0]
    assert adam_lr_verdict([want / 2, want * 0.75, want], BASE, 2)[0]


def test_the_adam_checks_accept_the_linear_rule_only_behind_a_warm_up():
    linear = scaled_lr(BASE, 2, "sgd")
    assert adam_lr_verdict([BASE, 1.5 * BASE, linear, linear], BASE, 2)[0]
    passed, detail, hint = adam_lr_verdict([linear] * 3, BASE, 2)
    assert not passed and f"{scaled_lr(BASE, 2, 'adam'):g}" in detail
    assert "linear rule, made for SGD" in hint and "hvd.size() ** 0.5" in hint


def test_the_adam_checks_reject_an_unscaled_rate():
    passed, _, hint = adam_lr_verdict([BASE] * 3, BASE, 2)
    assert not passed and "still the single-worker one" in hint


def test_the_checks_grade_the_exercises_with_the_base_rate_the_helper_scales():
    # exercises 5 and 15 train Adam from TRAIN_ARGS["lr"]; exercise 6 trains SGD, the linear rule
    assert checks_training.TRAIN_ARGS["lr"] == checks_torch.TRAIN_ARGS["lr"] == BASE
    assert 'scaled_lr(base, size, "sgd")' in read(
        "hvdcourse", "course", "exercises", "checks_training.py"
    )


def test_lesson_5_states_the_rule_once_with_its_sources():
    lesson = read("notebooks", "05_conversion.md")
    box = lesson.split("(conversion-lr-rule)=", 1)[1].split("\n:::\n", 1)[0]
    for words in (
        "linear rule",
        "Goyal et al.",
        "arXiv:1706.02677",
        "square-root",
        "Malladi et al.",
        "arXiv:2205.10287",
        "Horovod's own examples",
        "What the course does, and why",
        "warm-up",
    ):
        assert words in box, words
    assert lesson.count("(conversion-lr-rule)=") == 1


@pytest.mark.parametrize(
    "page",
    [
        "notebooks/14_beyond_horovod.md",
        "notebooks/09_pytorch.md",
        "notebooks/12_data_parallel_at_scale.md",
    ],
)
def test_later_lessons_link_the_rule_instead_of_restating_another(page):
    text = read(page)
    assert "<conversion-lr-rule>`" in text
    assert "lr * hvd.size()`" not in text and "lr * num_workers" not in text


@pytest.mark.parametrize(
    "source, rule",
    [
        ("ex05_conversion.md", "hvd.size() ** 0.5"),
        ("ex15_torch_conversion.md", "hvd.size() ** 0.5"),
        ("ex06_lr_warmup.md", "SGD(learning_rate=scaled_lr, momentum=0.9)"),
    ],
)
def test_each_exercise_solution_uses_the_rule_of_its_optimizer(source, rule):
    assert rule in read("exercises", "source", source)
