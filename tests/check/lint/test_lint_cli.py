"""The command hvdcourse-lint (and python -m hvdcourse.course.check.lint, and %hvdlint): what it
prints, its exit status, the ignore comments, "cannot tell" once per rule."""

import os
import subprocess
import textwrap

from conftest import PYTHON, ROOT
from hvdcourse.course.check.lint import lint, load_ipython_extension, magic, probe, run

TRAIN_HVD = os.path.join(ROOT, "hvdcourse", "examples", "train_hvd.py")
UNSCALED = textwrap.dedent(
    """\
    import torch
    import horovod.torch as hvd

    hvd.init()
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    """
)


def write(tmp_path, text, name="train.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_clean_script_prints_nothing_and_exits_0(capsys):
    assert lint.main([TRAIN_HVD]) == 0
    assert capsys.readouterr().out == ""


def test_a_finding_names_file_line_rule_fix_and_lesson_and_exits_1(tmp_path, capsys):
    path = write(tmp_path, UNSCALED)
    assert lint.main([path]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        f"{path}:6: unscaled-lr: SGD's learning rate (0.01) does not grow with the number of "
        "workers, though each step averages N times more examples; fix: multiply it by "
        "hvd.size() for SGD, by hvd.size() ** 0.5 for Adam and other adaptive optimizers "
        "(training.scaled_lr does), with a warm-up (lesson 09, PyTorch with Horovod, and DDP: "
        "Scale the learning rate, wrap the optimizer, broadcast rank 0's state)"
    ]


def test_an_ignore_comment_silences_its_rule_on_its_line_only(tmp_path):
    ignored = UNSCALED.replace("lr=0.01)", "lr=0.01)  # hvdlint: ignore[unscaled-lr]")
    assert lint.lint_source(ignored) == []
    other_rule = UNSCALED.replace("lr=0.01)", "lr=0.01)  # hvdlint: ignore[missing-warmup]")
    assert [f.rule for f in lint.lint_source(other_rule)] == ["unscaled-lr"]
    other_line = UNSCALED.replace("hvd.init()", "hvd.init()  # hvdlint: ignore[unscaled-lr]")
    assert [f.rule for f in lint.lint_source(other_line)] == ["unscaled-lr"]


def test_a_plain_ignore_comment_silences_every_rule_of_its_line():
    ignored = UNSCALED.replace("lr=0.01)", "lr=0.01)  # hvdlint: ignore")
    assert lint.lint_source(ignored) == []


def test_cannot_tell_is_said_once_per_rule_and_exits_0(tmp_path, capsys):
    text = textwrap.dedent(
        """\
        import tensorflow as tf
        import horovod.tensorflow.keras as hvd

        def train(model, x, y, callbacks):
            hvd.init()
            tf.config.set_visible_devices([], "GPU")
            model.fit(x, y, callbacks=callbacks, verbose=0)
            model.fit(x, y, callbacks=callbacks, verbose=0)
        """
    )
    items = lint.lint_source(text)
    assert all(item.note for item in items)
    rules = [item.rule for item in items]
    assert "missing-broadcast" in rules and len(rules) == len(set(rules))
    assert lint.main([write(tmp_path, text)]) == 0
    assert "cannot tell" in capsys.readouterr().out


def test_a_script_that_does_not_parse_gets_one_line_and_exits_2(tmp_path, capsys):
    path = write(tmp_path, "import horovod.torch as hvd\nhvd.init(\n")
    assert lint.main([path]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"{path}:") and "cannot read it" in out[0]


def test_run_on_a_single_worker_script_says_in_one_line_why_it_cannot(tmp_path):
    path = write(tmp_path, "import torch\nmodel = torch.nn.Linear(2, 2)\n")
    outcome = run.run_script(path)
    assert outcome.findings == [] and outcome.problem.count("\n") == 0
    assert "neither Horovod nor a PyTorch process group" in outcome.problem


def test_why_a_rank_could_not_run_is_one_line():
    assert probe.why_not(ModuleNotFoundError("no", name="wandb")) == (
        "it imports wandb, which is not installed in this environment"
    )
    missing = FileNotFoundError(2, "No such file or directory", "/data/imagenet")
    assert probe.why_not(missing) == "it needs /data/imagenet, which is not on this machine"
    cuda = AssertionError("Torch not compiled with CUDA enabled")
    assert probe.why_not(cuda).startswith("it needs a GPU (AssertionError: Torch not compiled")


def test_python_dash_m_and_the_console_script_run_the_command():
    module = subprocess.run(
        [PYTHON, "-m", "hvdcourse.course.check.lint", "--list-rules"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert module.returncode == 0 and "unsharded-data" in module.stdout
    script = os.path.join(os.path.dirname(PYTHON), "hvdcourse-lint")
    assert os.path.isfile(script), "pip install -e . (pyproject's [project.scripts])"
    with open(script) as fh:
        assert "hvdcourse.course.check.lint.lint" in fh.read()


class Shell:
    """What %hvdlint needs of IPython: the user's namespace and register_magic_function."""

    def __init__(self, history=()):
        self.user_ns = {"In": ["", *history, "%hvdlint"], "hvd": object()}
        self.magics = {}

    def register_magic_function(self, function, kind, name):
        self.magics[name] = (function, kind)


def test_the_extension_registers_the_hvdlint_line_and_cell_magic():
    shell = Shell()
    load_ipython_extension(shell)
    assert shell.magics["hvdlint"][1] == "line_cell"


def test_the_cell_magic_lints_the_cell_with_the_notebooks_names(capsys):
    shell = Shell(["import horovod.tensorflow.keras as hvd\n"])
    magic.hvdlint("", "hvd.init()\ntrain_data = train_data.shard(2, 0)\n", shell=shell)
    out = capsys.readouterr().out.splitlines()
    assert "cell:2: undefined-name: 'train_data' is used here" in "\n".join(out)
    assert all(line.startswith("cell:") for line in out)


def test_the_line_magic_alone_lints_the_cells_run_so_far_by_cell(capsys):
    shell = Shell(["import torch\nimport horovod.torch as hvd\n", "hvd.init()\nprint(size)\n"])
    magic.hvdlint("", None, shell=shell)
    assert capsys.readouterr().out.startswith("In[2]:2: undefined-name: 'size'")


def test_the_line_magic_with_a_file_runs_the_command(capsys):
    magic.hvdlint(TRAIN_HVD, None, shell=Shell())
    assert capsys.readouterr().out == ""
