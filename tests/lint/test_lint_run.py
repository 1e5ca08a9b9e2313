"""hvdcourse-lint --run on 2 real Horovod ranks (PyTorch, under mpirun): a script that skips
the broadcast and trains every rank on the same batches, and one where every rank writes the
checkpoint. Both runs are made once, by the module's fixture (about 25 CPU seconds together)."""

import textwrap

import pytest

from hvdcourse.course.check.lint.run import run_script

pytestmark = pytest.mark.ranks

# no broadcast, each rank its own initial weights, the same data on both ranks; rank 0 saves
SKIPS_BROADCAST = textwrap.dedent(
    """\
    import torch
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = torch.randn(64, 4), torch.randn(64, 2)
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(4, 2)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
    )
    for step in range(5):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[step::5]), y[step::5])
        loss.backward()
        optimizer.step()
    if hvd.rank() == 0:
        torch.save(model.state_dict(), "model.pt")
    """
)
# rank 0's state broadcast, each rank its own part of the data; every rank saves
EVERY_RANK_SAVES = textwrap.dedent(
    """\
    import torch
    import horovod.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = torch.randn(64, 4)[hvd.rank()::hvd.size()], torch.randn(64, 2)[hvd.rank()::hvd.size()]
    model = torch.nn.Linear(4, 2)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for step in range(5):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[step::5]), y[step::5])
        loss.backward()
        optimizer.step()
        torch.save(model.state_dict(), "checkpoint.pt")
    """
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each script's --run outcome: 2 ranks, 2 steps, from a folder that holds the scripts."""
    folder = tmp_path_factory.mktemp("lint-run")
    outcomes = {}
    for name, text in (
        ("skips_broadcast", SKIPS_BROADCAST),
        ("every_rank_saves", EVERY_RANK_SAVES),
    ):
        path = folder / f"{name}.py"
        path.write_text(text)
        outcomes[name] = run_script(str(path), np=2, steps=2, timeout=240, cwd=str(folder))
        assert not outcomes[name].problem, outcomes[name].problem
    return outcomes


def line_of(text, fragment):
    return next(n for n, line in enumerate(text.splitlines(), 1) if fragment in line)


def rules(outcome):
    return {f.rule: f for f in outcome.findings if not f.note}


def test_both_ranks_report_and_stop_after_the_step_limit(runs):
    for outcome in runs.values():
        assert [record["steps"] for record in outcome.records] == [2, 2]


def test_a_script_that_skips_the_broadcast_has_different_weights_before_the_first_step(runs):
    found = rules(runs["skips_broadcast"])
    assert found["run-weights"].what.startswith("on 2 ranks the weights differ before the first")
    assert found["run-weights"].line == line_of(SKIPS_BROADCAST, "optimizer.step()")


def test_ranks_that_train_on_the_same_batches_are_found(runs):
    assert "run-data" in rules(runs["skips_broadcast"])
    assert "run-data" not in rules(runs["every_rank_saves"])


def test_a_script_where_every_rank_saves_has_rank_1_writing_the_checkpoint(runs):
    found = rules(runs["every_rank_saves"])
    assert found["run-writes"].what.startswith("rank 1 wrote checkpoint.pt")
    assert found["run-writes"].line == line_of(EVERY_RANK_SAVES, "torch.save(")


def test_the_other_checks_pass_where_the_script_is_right(runs):
    assert "run-weights" not in rules(runs["every_rank_saves"])
    assert "run-writes" not in rules(runs["skips_broadcast"])  # rank 0 alone saved
