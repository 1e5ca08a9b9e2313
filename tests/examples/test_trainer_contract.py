"""Every trainer in hvdcourse/examples keeps the contract written in hvdcourse/examples/__init__.py:
``main(argv=None, callbacks=()) -> int``, the shared option names, the shared metrics record and
the one restore (training.resume_from_checkpoint). Static checks plus ``--help``: no training is
run."""

import argparse
import contextlib
import importlib
import inspect
import io
import os
import re

import pytest

from conftest import ROOT
from hvdcourse.examples.cli import training_parser

EXAMPLES = os.path.join(ROOT, "hvdcourse", "examples")
TRAINERS = sorted(
    name[:-3] for name in os.listdir(EXAMPLES) if re.fullmatch(r"train_\w+\.py", name)
)
CHECKPOINT_OPTIONS = {"--checkpoint-dir", "--no-resume"}


def source(name):
    with open(os.path.join(EXAMPLES, f"{name}.py")) as fh:
        return fh.read()


def options(parser: argparse.ArgumentParser) -> set:
    return {
        opt for action in parser._actions for opt in action.option_strings if opt.startswith("--")
    }


def help_options(name) -> set:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        importlib.import_module(f"hvdcourse.examples.{name}").main(["--help"])
    assert stop.value.code == 0
    return set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", out.getvalue()))


def test_the_five_trainers_are_found():
    assert {"train_single", "train_hvd", "train_tape", "train_elastic", "train_mwms"} <= set(
        TRAINERS
    )


@pytest.mark.parametrize("name", TRAINERS)
def test_main_takes_argv_and_callbacks_and_returns_int(name):
    signature = inspect.signature(importlib.import_module(f"hvdcourse.examples.{name}").main)
    assert [(p.name, p.default) for p in signature.parameters.values()] == [
        ("argv", None),
        ("callbacks", ()),
    ]
    assert signature.return_annotation in (int, "int")


@pytest.mark.parametrize("name", TRAINERS)
def test_trainer_accepts_the_shared_option_names(name):
    shared = options(training_parser("x")) - {"--help"}
    # train_elastic: state in memory, no checkpoint or warm-up options
    if "EpochCheckpoint" not in source(name):
        shared -= CHECKPOINT_OPTIONS | {"--warmup-epochs"}
    assert shared <= help_options(name)


@pytest.mark.parametrize("name", TRAINERS)
def test_trainer_restores_only_through_the_shared_restore(name):
    text = source(name)
    assert (
        "restore_or_error(" not in text and ".restore()" not in text and "exit_if_error" not in text
    )
    # the broadcast of the restored state is in training.py
    assert "broadcast_variables(checkpoint" not in text
    if "EpochCheckpoint" in text:
        assert "training.resume_from_checkpoint(" in text


@pytest.mark.parametrize("name", TRAINERS)
def test_trainer_writes_the_shared_metrics_record(name):
    text = source(name)
    # a trainer that runs another one in its workers (train_ray_hvd: train_hvd.main) passes on its record
    runs = re.search(r"\b(train_\w+)\.main\(", text)
    made = source(runs.group(1)) if runs else text
    # report_final_metrics (also through finish) reports the record to the launcher (run_ranks' results)
    assert re.search(r"training\.(finish|report_final_metrics)\(", made)
    assert re.search(r"training\.(finish|write_metrics)\(", text)


@pytest.mark.parametrize("name", TRAINERS)
def test_trainer_runs_as_a_command_through_run_trainer(name):
    assert re.search(
        r'if __name__ == "__main__":\n\s+from hvdcourse.examples.cli import run_trainer\n\n'
        r"\s+sys.exit\(run_trainer\(main\)\)",
        source(name),
    )


@pytest.mark.parametrize("name", TRAINERS)
def test_no_trainer_exits_by_itself(name):
    body = source(name).split('if __name__ == "__main__":')[0]
    assert "sys.exit" not in body and "SystemExit" not in body
