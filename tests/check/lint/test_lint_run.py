"""hvdcourse-lint --run on 2 real Horovod ranks (PyTorch, under mpirun): a script that skips
the broadcast and trains every rank on the same batches, and one where every rank writes the
checkpoint. Both runs are made once, by the module's fixture (about 25 CPU seconds together)."""

import os

import pytest

from hvdcourse.course.check.lint.run import run_script

pytestmark = pytest.mark.ranks

# 3 epochs of 8 batches: the run stops the loop after 2 steps, then gives each pass one batch
TRAIN = """\
import torch
import horovod.torch as hvd
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(0)
data = TensorDataset(torch.randn(128, 4), torch.randn(128, 2))
{loader}
torch.manual_seed({seed})
model = torch.nn.Linear(4, 2)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
{broadcast}
for epoch in range(3):
    {epoch}
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    {save}
"""
# no broadcast, each rank its own initial weights, the same batches on both ranks; rank 0 saves
SKIPS_BROADCAST = TRAIN.format(
    loader="loader = DataLoader(data, batch_size=16)",
    seed="hvd.rank()",
    broadcast="",
    epoch="",
    save='if hvd.rank() == 0:\n        torch.save(model.state_dict(), "model.pt")',
)
# rank 0's state broadcast, each rank its own part of the data; every rank saves
EVERY_RANK_SAVES = TRAIN.format(
    loader="sampler = DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank())\n"
    "loader = DataLoader(data, batch_size=8, sampler=sampler)",
    seed="0",
    broadcast="hvd.broadcast_parameters(model.state_dict(), root_rank=0)",
    epoch="sampler.set_epoch(epoch)",
    save='torch.save(model.state_dict(), "checkpoint.pt")',
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


def test_the_loop_stops_at_the_step_limit_and_the_script_runs_to_its_end(runs):
    """2 steps, then one batch in each of the 2 other epochs; rank 0's save after the loop ran."""
    for outcome in runs.values():
        assert [record["steps"] for record in outcome.records] == [4, 4]
    written = [os.path.basename(p) for p, _ in runs["skips_broadcast"].records[0]["written"]]
    assert written == ["model.pt"]


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
