"""The rules of the data: each rank its own part, a sampler that reshuffles, steps counted for N
workers (lessons: Converting a Keras MNIST script to Horovod; PyTorch with Horovod, and DDP).
"""

from __future__ import annotations

import ast

from hvdcourse.course.check.lint.facts import Facts, keras_member
from hvdcourse.course.check.lint.rules import Report
from hvdcourse.course.check.lint.source import last_name

DISTRIBUTING = {"experimental_distribute_dataset", "distribute_datasets_from_function"}
# keyword arguments and calls where the rank is a seed or a switch, not a choice of data
NOT_DATA = ("seed", "verbose", "quiet", "log", "print", "name")
# where a whole data set comes from
SOURCE_PREFIXES = (
    "tensorflow_datasets.load",
    "torchvision.datasets.",
    "datasets.load_dataset",
    "sklearn.datasets.",
    "numpy.load",
    "numpy.genfromtxt",
    "numpy.loadtxt",
    "pandas.read_",
    "torch.load",
    "h5py.File",
    "hvdcourse.examples.data.load_",
    "hvdcourse.examples.data.convert_npm_digits",
)
# random data made by each process: a benchmark's, not a data set the ranks should split
SYNTHETIC_PREFIXES = ("numpy.random.", "torch.rand", "random.", "tensorflow.random.")
KERAS_SOURCES = (
    "datasets.",
    "utils.image_dataset_from_directory",
    "utils.text_dataset_from_directory",
    "preprocessing.image_dataset_from_directory",
    "data.Dataset.",
    "data.TFRecordDataset",
    "data.TextLineDataset",
    "data.experimental.make_csv_dataset",
)


def is_sampler(f: Facts, node) -> bool:
    """PyTorch's ``DistributedSampler`` or Horovod's ``ElasticSampler`` (or a class of that name)."""
    return isinstance(node, ast.Call) and last_name(node.func) in (
        "DistributedSampler",
        "ElasticSampler",
    )


def is_synthetic(f: Facts, node) -> bool:
    return isinstance(node, ast.Call) and f.script.call_name(node).startswith(SYNTHETIC_PREFIXES)


def is_shard(f: Facts, node) -> bool:
    """Whether ``node`` gives a rank its own part: a shard call, a distributed sampler, or the
    rank used to pick data (not as a seed, a switch or a name)."""
    s = f.script
    if isinstance(node, ast.Call):
        if "shard" in last_name(node.func).lower() or last_name(node.func) in DISTRIBUTING:
            return True
        if is_sampler(f, node):
            return True
    if s.is_rank_call(node):
        return not _rank_as_setting(f, node)
    return False


def _rank_as_setting(f: Facts, node) -> bool:
    s = f.script
    child, current = node, s.parent.get(node)
    while current is not None and not isinstance(current, ast.stmt):
        if isinstance(current, ast.keyword) and current.arg:
            if any(word in current.arg.lower() for word in NOT_DATA):
                return True
        if isinstance(current, ast.Call):
            if any(word in last_name(current.func).lower() for word in NOT_DATA):
                return True
            if child in current.args and "seed" in ast.unparse(child).lower():
                return True
        child, current = current, s.parent.get(current)
    if isinstance(current, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = current.targets if isinstance(current, ast.Assign) else [current.target]
        if any(any(w in ast.unparse(t).lower() for w in NOT_DATA) for t in targets):
            return True
    return False


def is_source(f: Facts, node) -> bool:
    """Whether ``node`` loads or makes a whole data set."""
    if not isinstance(node, ast.Call):
        return False
    full = f.script.call_name(node)
    if full.startswith(SOURCE_PREFIXES):
        return True
    member = keras_member(full)
    return bool(member) and member.startswith(KERAS_SOURCES)


def training_data(f: Facts) -> list:
    """``[(anchor, [expressions])]``: what each ``fit`` and each training loop trains on."""
    s = f.script
    found = [(fit, [x]) for fit in f.fits if (x := s.keyword(fit, "x", 0)) is not None]
    for loop in f.innermost_loops():
        exprs = []
        if isinstance(loop, (ast.For, ast.AsyncFor)) and not (
            isinstance(loop.iter, ast.Call) and last_name(loop.iter.func) == "range"
        ):
            exprs.append(loop.iter)
        for node in (n for b in loop.body for n in ast.walk(b)):
            if not isinstance(node, ast.Call):
                continue
            name = last_name(node.func)
            if name == "next" and node.args:
                exprs.append(node.args[0])
            elif isinstance(node.func, ast.Name) and node.func.id in f.stepping:
                # the script's own training step (a function with a loop of its own is checked
                # there: train(epoch) passes no data)
                if not any(
                    isinstance(n, (ast.For, ast.While))
                    for function in s.functions[node.func.id]
                    for n in ast.walk(function)
                ):
                    exprs.extend(node.args)
            elif name == "backward" and isinstance(node.func, ast.Attribute):
                exprs.append(node.func.value)  # the loss: its sources hold the batch
            elif name == "gradient" and node.args:
                exprs.append(node.args[0])
        if exprs:
            found.append((loop, exprs))
    return found


def check_sharding(f: Facts, report: Report) -> None:
    s = f.script
    for anchor, exprs in training_data(f):
        nodes = [n for e in exprs for n in s.sources(e)]
        if any(is_shard(f, n) for n in nodes) or any(is_synthetic(f, n) for n in nodes):
            continue  # sharded, or random data each process makes for itself
        sources = [n for n in nodes if is_source(f, n)]
        if not sources:
            what = (
                f"where {s.words(exprs[0])} comes from"
                if anchor in f.fits
                else "where the batches of this training loop come from"
            )
            report.note(
                "unsharded-data",
                anchor,
                f"the script does not show {what}: check that each rank trains on its own part",
            )
            continue
        loaders = [
            n for n in nodes if isinstance(n, ast.Call) and last_name(n.func) == "DataLoader"
        ]
        where = loaders[0] if loaders else anchor
        what = (
            f"model.fit trains on {s.words(exprs[0])}, the whole data set, on every rank"
            if anchor in f.fits
            else f"the training loop reads {s.words(exprs[0])}, the whole data set, on every rank"
        )
        if loaders:
            what = "this DataLoader gives every rank the whole data set (no DistributedSampler)"
        report.finding("unsharded-data", where, what + ": N workers do the same work N times")


def check_sampler(f: Facts, report: Report) -> None:
    s = f.script
    started = any(s.dist_member(c.func) == "init_process_group" for c in s.calls)
    if f.flavour == "torch" and f.distributed and not started:
        for call in s.calls:
            if last_name(call.func) == "DistributedSampler" and not (
                s.keyword(call, "num_replicas", 1) is not None
                and s.keyword(call, "rank", 2) is not None
            ):
                report.finding(
                    "unsharded-data",
                    call,
                    "DistributedSampler without num_replicas= and rank= asks torch.distributed "
                    "for them, which a Horovod script never starts (ValueError: Default process "
                    "group has not been initialized)",
                )
    if s.method_calls("set_epoch") or not _several_epochs(f):
        return  # set_epoch called, or one pass over the data: one order is all it needs
    # the samplers of the training data (an evaluation's order does not matter)
    trained = {id(n) for _, exprs in training_data(f) for e in exprs for n in s.sources(e)}
    for call in s.calls:
        if last_name(call.func) != "DistributedSampler" or id(call) not in trained:
            continue
        shuffle = s.keyword(call, "shuffle", 3)
        if isinstance(shuffle, ast.Constant) and shuffle.value is False:
            continue
        report.finding(
            "sampler-epoch",
            call,
            "the DistributedSampler shuffles, but set_epoch is never called: every epoch sees "
            "the data in the first epoch's order",
        )


def _several_epochs(f: Facts) -> bool:
    """Whether the script goes over its data more than once: a training loop inside another loop,
    directly or through the script's function that holds it (``for epoch in ...: train(epoch)``)."""
    s = f.script
    training = {id(loop) for loop in f.loops}
    holders = {
        name
        for name, functions in s.functions.items()
        for function in functions
        if any(id(n) in training for n in ast.walk(function))
    }
    for loop in ast.walk(s.tree):
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):
            continue
        for node in (n for part in loop.body for n in ast.walk(part)):
            if id(node) in training:
                return True
            if isinstance(node, ast.Call) and last_name(node.func) in holders:
                return True
    return False


def _counted_on_whole_data(f: Facts, expr) -> ast.Call | None:
    """The ``len(x)`` (of data no rank sharded) that a step count ``expr`` divides, or None when
    the count is divided by the workers or counts a rank's own part."""
    s = f.script
    nodes = s.sources(expr)
    if any(s.is_size_call(n) for n in nodes):
        return None
    for node in nodes:
        if isinstance(node, ast.Call) and last_name(node.func) == "len" and node.args:
            data = s.sources(node.args[0])
            if any(is_shard(f, n) for n in data):
                return None
            if any(is_source(f, n) for n in data):
                return node
    return None


def check_steps(f: Facts, report: Report) -> None:
    s = f.script
    for call in s.calls:
        if not f.course(call, "training.steps_per_epoch"):
            continue
        workers = s.keyword(call, "workers", 2)
        if workers is None or (isinstance(workers, ast.Constant) and workers.value == 1):
            report.finding(
                "unscaled-steps",
                call,
                "training.steps_per_epoch counts the steps of one worker (no workers argument): "
                "with N workers each epoch would go over the data N times",
            )
    counts = [s.keyword(fit, "steps_per_epoch") for fit in f.fits]
    for loop in f.loops:
        if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.iter, ast.Call):
            name = last_name(loop.iter.func)
            if name == "range" and loop.iter.args:
                counts.append(loop.iter.args[-1] if len(loop.iter.args) < 3 else loop.iter.args[1])
            elif name == "islice" and len(loop.iter.args) > 1:
                counts.append(loop.iter.args[-1])
    for count in counts:
        if count is None:
            continue
        whole = _counted_on_whole_data(f, count)
        if whole is not None and not any(
            f.course(n, "training.steps_per_epoch") for n in s.sources(count)
        ):
            report.finding(
                "unscaled-steps",
                s.statement_of(whole) or count,
                f"the steps are counted from {s.words(whole)}, the whole data set, and not "
                "divided by the number of workers",
            )
