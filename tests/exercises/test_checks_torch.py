"""The check of exercise 15 (hvdcourse/course/exercises/checks_torch.py) on 2 ranks: a naive conversion
and two classic mistakes get rank-aware findings. (The right answer: the solution notebook.)"""

import os

import jupytext

from hvdcourse.course.exercises import checks_torch, paths

SOURCE = os.path.join(paths.SOURCE_DIR, "ex15_torch_conversion.md")


def helpers():
    """The exercise's first cell (imports, restore, save, train_single), without running train_single."""
    cell = next(c.source for c in jupytext.read(SOURCE).cells if c.cell_type == "code")
    namespace = {"__name__": "__main__"}
    exec(cell.split("\nmodel, loader, metrics = train_single(")[0], namespace)
    return namespace


def define(source: str):
    namespace = helpers()
    exec(source, namespace)
    return namespace["train_hvd"]


NAIVE = """
def train_hvd(epochs=2, batch_size=16, lr=1e-3, max_steps=3, checkpoint_dir="checkpoints",
              resume_from="start.pt"):
    import horovod.torch as hvd

    hvd.init()  # and the optimizer wrapped without names: nothing else of the conversion
    mnist = data.load_mnist(quiet=True)
    train_set = TensorDataset(*torch_model.to_tensors(mnist.x_train, mnist.y_train))
    loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, drop_last=True)
    steps = training.steps_per_epoch(len(train_set), batch_size, 1, max_steps)
    model = torch_model.build_model()
    optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=lr))
    loss_fn = torch_model.loss_fn()
    if os.path.exists(resume_from):
        restore(resume_from, model, optimizer, lr)
    for epoch in range(epochs):
        epoch_loss = 0.0
        for x, y in itertools.islice(loader, steps):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
        train_loss = epoch_loss / steps
        save(checkpoint_dir, epoch, model, optimizer)
    return model, loader, {"train_loss": train_loss}
"""


def findings(result):
    return {f.criterion.split(" (")[0]: f for f in result.findings}


def test_naive_conversion_gets_each_missing_step_named_with_the_rank_that_differs():
    result = checks_torch.ex15_torch_conversion(define(NAIVE), quiet=True)
    found = findings(result)
    assert result.score == 1 and found["trains on 2 ranks and returns"].passed
    weights = found["before the first step both ranks hold the weights rank 0 restored"]
    assert "rank 1's weights differ from rank 0's" in weights.detail
    assert "did you broadcast the parameters?" in weights.hint
    state = found["before the first step both ranks hold the optimizer state rank 0 restored"]
    assert (
        "rank 1 has no Adam state at all" in state.detail
        and "broadcast_optimizer_state" in state.hint
    )
    assert (
        "allreduce.noname"
        in found["the DistributedOptimizer names each gradient after its parameter"].detail
    )
    assert (
        "they train on the same data"
        in found[
            "in an epoch the ranks train on disjoint parts that together cover the training set"
        ].detail
    )
    assert (
        "still the single-worker one"
        in found["the learning rate is scaled for the number of workers"].hint
    )
    assert "hvd.allreduce" in found["the reported training loss is averaged over the ranks"].hint
    assert "rank 1 wrote" in found["only rank 0 wrote checkpoint files"].detail


def test_wrapping_the_optimizer_after_restoring_is_explained():
    source = NAIVE.replace(
        "optimizer = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=lr))",
        "optimizer = torch.optim.Adam(model.parameters(), lr=lr)",
    ).replace(
        "        restore(resume_from, model, optimizer, lr)\n",
        "        restore(resume_from, model, optimizer, lr)\n"
        "    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())\n"
        "    hvd.broadcast_parameters(model.state_dict(), root_rank=0)\n"
        "    hvd.broadcast_optimizer_state(optimizer, root_rank=0)\n",
    )
    result = checks_torch.ex15_torch_conversion(define(source), quiet=True)
    found = findings(result)
    assert found["before the first step both ranks hold the weights rank 0 restored"].passed
    state = found["before the first step both ranks hold the optimizer state rank 0 restored"]
    assert "at the first step its optimizer did not hold start.pt's state" in state.detail
    assert "wrap the optimizer before restoring" in state.hint
    assert found["after training both ranks hold identical weights"].passed


def test_restoring_on_every_rank_points_at_rank_0s_file():
    source = NAIVE.replace(
        "    if os.path.exists(resume_from):\n        restore(", "    if True:\n        restore("
    )
    result = checks_torch.ex15_torch_conversion(define(source), quiet=True)
    runs = findings(result)["trains on 2 ranks and returns"]
    assert not runs.passed and "FileNotFoundError" in runs.detail
    assert "only rank 0's folder holds start.pt" in runs.hint
