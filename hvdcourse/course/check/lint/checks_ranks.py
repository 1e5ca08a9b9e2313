"""The rules of the ranks: who writes, who averages, which GPU, and which collectives every rank
calls (lessons: Converting a Keras MNIST script to Horovod; PyTorch with Horovod, and DDP; Faults,
hangs and elastic training).
"""

from __future__ import annotations

import ast
import re

from hvdcourse.course.check.lint.checks_data import is_shard, training_data
from hvdcourse.course.check.lint.facts import Facts, keras_member
from hvdcourse.course.check.lint.rules import Report
from hvdcourse.course.check.lint.source import DIST_COLLECTIVES, FUNCTIONS, last_name

HVD_COLLECTIVES = {
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "grouped_allreduce",
    "grouped_allreduce_",
    "allgather",
    "allgather_async",
    "allgather_object",
    "grouped_allgather",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "broadcast_object",
    "broadcast_variables",
    "broadcast_global_variables",
    "broadcast_parameters",
    "broadcast_optimizer_state",
    "alltoall",
    "alltoall_async",
    "reducescatter",
    "grouped_reducescatter",
    "join",
    "barrier",
}
AVERAGING = {"allreduce", "allreduce_", "grouped_allreduce", "allgather", "allgather_object"}
DIST_AVERAGING = {"all_reduce", "all_gather", "all_gather_object", "reduce", "gather_object"}
# the words of a metric line, matched as whole words of the printed text and its names (val_loss,
# trainLoss, top5; not accelerator, accumulation_steps, name, nor "mixed precision")
METRIC_WORDS = {
    "loss",
    "losses",
    "acc",
    "accuracy",
    "metric",
    "metrics",
    "score",
    "scores",
    "top1",
    "top5",
    "perplexity",
    "ppl",
    "f1",
    "auc",
    "mse",
    "rmse",
    "mae",
    "precision",
    "recall",
}
NOT_A_METRIC_BEFORE = {"mixed", "half", "full", "single", "double", "numerical", "float"}
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def names_a_metric(text: str) -> bool:
    """Whether ``text`` (a print's arguments, as source) names a metric by one of its words."""
    words = [w.lower() for w in _WORD.findall(text)]
    for i, word in enumerate(words):
        following = words[i + 1] if i + 1 < len(words) else ""
        if word in ("top", "f") and following in ("1", "5"):
            word += following
        if word in METRIC_WORDS and not (
            word == "precision" and i and words[i - 1] in NOT_A_METRIC_BEFORE
        ):
            return True
    return False


CHECKPOINT_OWNERS = re.compile(r"model|ckpt|checkpoint|manager|saver|net", re.I)
KERAS_MODELS = ("Sequential", "Model", "models.Sequential", "models.Model", "models.load_model")


# ---------------------------------------------------------------------- who writes
def _collective(f: Facts, call) -> str | None:
    """The name of the collective that ``call`` runs, or None."""
    s = f.script
    if not isinstance(call, ast.Call) or not isinstance(call.func, (ast.Name, ast.Attribute)):
        return None
    member = s.horovod_member(call.func)
    if member and member[1] in HVD_COLLECTIVES:
        return f"hvd.{member[1]}"
    member = s.dist_member(call.func)
    if member in DIST_COLLECTIVES:
        return f"dist.{member}"
    return None


def _averaged(f: Facts, node) -> bool:
    """Whether ``node``'s value went through an allreduce (or allgather), or a name of it was
    allreduced in place (``dist.all_reduce(t)``)."""
    s = f.script
    sources = s.sources(node)
    for sub in sources:
        if isinstance(sub, ast.Call):
            name = _collective(f, sub) or ""
            if name.split(".")[-1] in AVERAGING | DIST_AVERAGING:
                return True
    names = {n.id for n in sources if isinstance(n, ast.Name)}
    for call in s.calls:
        name = _collective(f, call) or ""
        if name.split(".")[-1] in AVERAGING | DIST_AVERAGING and call.args:
            if isinstance(call.args[0], ast.Name) and call.args[0].id in names:
                return True
    return False


def _unreached(f: Facts, node) -> bool:
    """Whether ``node`` sits in a function of the script that nothing in the script refers to."""
    s = f.script
    for function in s.enclosing(node, FUNCTIONS):
        if s.enclosing(function, (ast.ClassDef,)):
            return False  # a method: its class decides
        used = any(
            isinstance(n, ast.Name) and n.id == function.name and isinstance(n.ctx, ast.Load)
            for n in ast.walk(s.tree)
        )
        if not used:
            return True
    return False


def _per_rank(f: Facts, call) -> bool:
    """Whether a write's arguments name the rank (each rank its own file or line)."""
    s = f.script
    return any(s.depends_on_rank(arg) for arg in call.args + [k.value for k in call.keywords])


def _labels_rank(f: Facts, call) -> bool:
    """Whether a printed line names its rank (``print(f"[rank {rank}] loss {loss}")``): the rank in
    its arguments, or in a name given it at most two assignments away; not a loss computed on a
    batch moved to the device that the local rank chose (``x.to(device)``), printed by every rank."""
    s = f.script
    return any(
        s.depends_on_rank(arg, depth=2) for arg in call.args + [k.value for k in call.keywords]
    )


def _writer(f: Facts, call) -> str | None:
    """``checkpoints`` or ``logs`` when ``call`` writes a file at once, else None."""
    s = f.script
    full = s.call_name(call)
    member = keras_member(full)
    if full == "torch.save" or member in ("models.save_model", "saved_model.save"):
        return "checkpoints"
    if isinstance(call.func, ast.Attribute):
        method = call.func.attr
        owner = call.func.value
        if method == "save_weights":
            return "checkpoints"
        if method in ("save", "write") and (
            s.reaches(
                owner,
                lambda n: (
                    isinstance(n, ast.Call)
                    and (
                        keras_member(s.call_name(n))
                        in ("train.Checkpoint", "train.CheckpointManager", *KERAS_MODELS)
                        or f.course(n, "training.EpochCheckpoint", "torch_training.TorchCheckpoint")
                    )
                ),
            )
            or method == "save"
            and CHECKPOINT_OWNERS.search(last_name(owner) or "")
        ):
            return "checkpoints"
        if method in ("savefig", "to_csv", "add_scalar", "add_scalars"):
            return "logs" if method in ("savefig", "to_csv") else None
    if member == "summary.create_file_writer" or full in (
        "torch.utils.tensorboard.SummaryWriter",
        "tensorboardX.SummaryWriter",
        "logging.FileHandler",
    ):
        return "logs"
    if full == "logging.basicConfig" and s.keyword(call, "filename") is not None:
        return "logs"
    if isinstance(call.func, ast.Name) and call.func.id == "open" and "open" not in s.aliases:
        mode = s.keyword(call, "mode", 1)
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
            if set(mode.value) & set("wax+"):
                return "logs"
    return None


def check_writes(f: Facts, report: Report) -> None:
    s = f.script
    single = "" if f.distributed else " (once this script runs on N workers)"
    # callbacks that write, in the lists that fit gets
    for fit in f.fits:
        if s.rank_guard(fit) is not None:
            continue
        for element in f.callbacks(fit).elements:
            if element.kind not in ("checkpoint", "log"):
                continue
            maker = element.made_by
            if s.rank_guard(element.site) is not None or s.rank_guard(element.node) is not None:
                continue
            if maker is not None and _per_rank(f, maker):
                continue
            what = f"{s.words(maker.func)}(...)" if maker is not None else s.words(element.node)
            if element.kind == "checkpoint":
                report.finding(
                    "every-rank-checkpoints",
                    maker or element.site,
                    f"{what} is in the callbacks of every rank: all of them write the same "
                    f"checkpoint files at the same time{single}",
                )
            else:
                report.finding(
                    "every-rank-logs",
                    maker or element.site,
                    f"{what} is in the callbacks of every rank: each writes the same log{single}",
                )
    # calls that write now
    for call in s.calls:
        kind = _writer(f, call)
        if kind is None or _unreached(f, call) or s.rank_guard(call) is not None:
            continue
        if _per_rank(f, call):
            continue
        rule = "every-rank-checkpoints" if kind == "checkpoints" else "every-rank-logs"
        report.finding(
            rule,
            call,
            f"{s.words(call.func)}(...) runs on every rank: each writes the same file{single}",
        )
    # metrics printed, and Keras' progress lines
    for call in s.calls:
        if not (isinstance(call.func, ast.Name) and call.func.id == "print"):
            continue
        text = " ".join(ast.unparse(a) for a in call.args)
        if not names_a_metric(text) or _unreached(f, call):
            continue
        if s.rank_guard(call) is not None or _labels_rank(f, call):
            continue
        report.finding(
            "every-rank-logs",
            call,
            f"every rank prints this metric line{single}: N copies of it, each of one rank",
        )
    for call in f.fits + f.model_calls("evaluate"):
        if s.rank_guard(call) is not None:
            continue
        verbose = _constant(f, s.keyword(call, "verbose"))
        if verbose is None or (
            isinstance(verbose, ast.Constant) and verbose.value not in (0, False, "0")
        ):
            shown = "the default verbose=1" if verbose is None else f"verbose={verbose.value!r}"
            report.finding(
                "every-rank-logs",
                call,
                f"model.{call.func.attr} prints its progress on every rank ({shown}){single}",
            )


def _constant(f: Facts, node):
    """``node``, or the constant that the name ``node`` was given (``verbose = 2``) when the
    script assigns it once, before, and with no test on the rank."""
    s = f.script
    if isinstance(node, ast.Name):
        found, param = s.bindings(node.id, node)
        if len(found) == 1 and not param and isinstance(found[0][1], ast.Constant):
            if s.rank_guard(found[0][2]) is None:
                return found[0][1]
    return node


# ---------------------------------------------------------------------- who averages
def check_metrics(f: Facts, report: Report) -> None:
    s = f.script
    for fit in f.fits:
        callbacks = f.callbacks(fit)
        validation = s.keyword(fit, "validation_data")
        sharded = validation is not None and any(is_shard(f, n) for n in s.sources(validation))
        kinds = [e.kind for e in callbacks.elements]
        monitors = [e for e in callbacks.elements if _monitors(f, e, sharded)]
        average = kinds.index("average") if "average" in kinds else None
        if average is None:
            if not (sharded or monitors):
                continue
            if callbacks.unknown:
                report.note(
                    "unaveraged-metrics",
                    callbacks.where,
                    f"the callbacks of fit include {s.words(callbacks.unknown[0])}, which the "
                    "script does not show: check that MetricAverageCallback is among them",
                )
                continue
            what = (
                "each rank validates on its own part of the data, and no MetricAverageCallback "
                "averages the results: rank 0 reports its part's metrics as the whole set's"
                if sharded
                else f"{s.words(monitors[0].made_by.func)} picks by rank 0's own metrics: no "
                "MetricAverageCallback averages them"
            )
            report.finding("unaveraged-metrics", callbacks.where, what)
            continue
        early = [e for e in monitors if callbacks.elements.index(e) < average]
        if early:
            element = callbacks.elements[average]
            report.finding(
                "unaveraged-metrics",
                element.made_by or element.site,
                f"MetricAverageCallback comes after {s.words(early[0].made_by.func)} (line "
                f"{early[0].made_by.lineno}), which reads the metrics before they are averaged",
            )
    if f.flavour in ("torch", "ddp") or not f.fits:
        _check_printed_metrics(f, report)


def _monitors(f: Facts, element, sharded: bool) -> bool:
    """Whether a callback picks by a metric that differs between the ranks."""
    s = f.script
    call = element.made_by
    if call is None or element.kind not in ("checkpoint", "monitor"):
        return False
    if element.kind == "checkpoint" and f.keras(call, "callbacks.ModelCheckpoint"):
        best = s.keyword(call, "save_best_only", 2)
        if not (isinstance(best, ast.Constant) and best.value is True):
            return False
    if element.kind == "checkpoint" and not (
        f.keras(call, "callbacks.ModelCheckpoint") or f.hvd(call, "callbacks.BestModelCheckpoint")
    ):
        return False
    monitor = s.keyword(call, "monitor", 1 if element.kind == "checkpoint" else 0)
    name = monitor.value if isinstance(monitor, ast.Constant) else "val_loss"
    if not isinstance(name, str):
        return False
    return sharded or not name.startswith("val_")


def _check_printed_metrics(f: Facts, report: Report) -> None:
    """A PyTorch (or hand-written TensorFlow) loop printing metrics of one rank's part of the
    validation data, with no collective on the way."""
    s = f.script
    trained = {id(n) for _, exprs in training_data(f) for e in exprs for n in s.sources(e)}
    for call in s.calls:
        if not (isinstance(call.func, ast.Name) and call.func.id == "print"):
            continue
        text = " ".join(ast.unparse(a) for a in call.args)
        if not names_a_metric(text):
            continue
        nodes = [n for a in call.args for n in s.sources(a)]
        parts = [n for n in nodes if id(n) not in trained and is_shard(f, n)]
        if not parts or any(_averaged(f, a) for a in call.args):
            continue
        report.finding(
            "unaveraged-metrics",
            call,
            "this line prints a metric of this rank's part of the data (from "
            f"{s.words(s.statement_of(parts[0]) or parts[0])[:60]}), averaged with no other rank",
        )


# ---------------------------------------------------------------------- which GPU
def _device_index(f: Facts, call):
    """The GPU index that ``call`` picks, when it picks one."""
    s = f.script
    full = s.call_name(call)
    if full == "torch.cuda.set_device" and call.args:
        return call.args[0]
    if full == "torch.device" and len(call.args) > 1:
        return call.args[1]
    if isinstance(call.func, ast.Attribute) and call.func.attr == "cuda" and call.args:
        return call.args[0]
    if full in ("torch.device",) or (
        isinstance(call.func, ast.Attribute) and call.func.attr == "to"
    ):
        for arg in call.args[:1]:
            if isinstance(arg, ast.JoinedStr) and "cuda:" in ast.unparse(arg):
                values = [v.value for v in arg.values if isinstance(v, ast.FormattedValue)]
                return values[0] if values else None
    if keras_member(full) in (
        "config.set_visible_devices",
        "config.experimental.set_visible_devices",
    ):
        devices = s.keyword(call, "devices", 0)
        if isinstance(devices, ast.Subscript):
            return devices.slice
    return None


def _modulo(f: Facts, index) -> bool:
    return any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in f.script.sources(index)
    )


def _uses_default_gpu(f: Facts, call) -> bool:
    s = f.script
    full = s.call_name(call)
    if isinstance(call.func, ast.Attribute) and call.func.attr == "cuda" and not call.args:
        return s.qualname(call.func) is None  # x.cuda(), not torch.cuda
    if full == "torch.device" and len(call.args) == 1:
        return any(
            isinstance(n, ast.Constant) and n.value == "cuda" for n in ast.walk(call.args[0])
        )
    if isinstance(call.func, ast.Attribute) and call.func.attr == "to" and call.args:
        arg = call.args[0]
        return isinstance(arg, ast.Constant) and arg.value == "cuda"
    return False


def check_device(f: Facts, report: Report) -> None:
    s = f.script
    hidden = None
    for node in ast.walk(s.tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.slice, ast.Constant)
                    and target.slice.value == "CUDA_VISIBLE_DEVICES"
                    and s.depends_on_rank(node.value)
                ):
                    hidden = node
    chosen = False
    for call in s.calls:
        index = _device_index(f, call)
        if index is None:
            continue
        chosen = True
        if hidden is not None and s.depends_on_rank(index) and not _modulo(f, index):
            report.finding(
                "device-hidden",
                call,
                f"line {hidden.lineno} leaves this process one GPU (CUDA_VISIBLE_DEVICES), and "
                f"here it asks for GPU number {s.words(index)}, which only a node's local rank 0 "
                "has (its one GPU is number 0)",
            )
        elif (
            s.depends_on_rank(index)
            and not s.depends_on_rank(index, local=True)
            and not _modulo(f, index)
        ):
            report.finding(
                "device-rank",
                call,
                f"the GPU is chosen by {s.words(index)}, the rank in the whole job: on the "
                "second node it names a GPU that does not exist",
            )
    # TF1's visible_device_list, CUDA_VISIBLE_DEVICES: one GPU left, by the local rank
    narrowed = any(
        isinstance(node, ast.Assign)
        and any("visible_device" in ast.unparse(t).lower() for t in node.targets)
        and s.depends_on_rank(node.value, local=True)
        for node in ast.walk(s.tree)
    )
    if f.uses_torch and not chosen and not narrowed:
        for call in s.calls:
            if _uses_default_gpu(f, call):
                if any(s.depends_on_rank(a, local=True) for a in call.args):
                    continue
                report.finding(
                    "device-rank",
                    call,
                    "every process uses GPU 0 (no torch.cuda.set_device, no local rank): the "
                    "processes of a node pile onto one GPU, unless the launcher leaves each "
                    "process one GPU (srun --gpus-per-task=1)",
                )
                break
    chosen = chosen or narrowed
    if (
        f.flavour == "keras"
        and not chosen
        and not any(
            s.depends_on_rank(c, local=True)
            for c in s.calls
            if "device" in last_name(c.func).lower()
        )
    ):
        first = next((c for c in s.calls if f.hvd(c, "init")), None)
        report.note(
            "device-rank",
            first or 1,
            "the script never picks a GPU per process; on a GPU node pin one, "
            "tf.config.set_visible_devices(gpus[hvd.local_rank()], 'GPU') (on CPUs it needs none)",
        )


# ---------------------------------------------------------------------- collectives on some ranks
def check_collectives(f: Facts, report: Report) -> None:
    s = f.script
    for call in s.calls:
        name = _collective(f, call)
        if name is None:
            continue
        guard = s.rank_guard(call)
        if guard is None:
            continue
        if isinstance(guard, (ast.If, ast.IfExp)) and _both_sides(f, guard, name):
            continue
        if isinstance(guard, ast.Call) and _called_on_both_sides(f, guard):
            continue
        where = f"line {guard.lineno}" if guard.lineno != call.lineno else "this line"
        report.finding(
            "collective-in-rank-branch",
            call,
            f"{name}() runs only on the ranks that pass the test on the rank ({where}): the other "
            "ranks never call it, and the job hangs",
        )


def _both_sides(f: Facts, guard, name: str) -> bool:
    """Whether both branches of ``guard`` call the collective ``name`` (every rank joins it)."""
    if isinstance(guard, ast.If):
        sides = [guard.body, guard.orelse]
    else:
        sides = [[guard.body], [guard.orelse]]
    found = []
    for side in sides:
        names = {
            _collective(f, n) for part in side for n in ast.walk(part) if isinstance(n, ast.Call)
        }
        found.append(name in names)
    return all(found)


def _called_on_both_sides(f: Facts, use: ast.Call) -> bool:
    """Whether the script's function that ``use`` calls is called in both branches of one ``if``
    on the rank (``if rank == 0: print(report()) else: report()``): every rank calls it."""
    s = f.script
    uses = [c for c in s.calls if isinstance(c.func, ast.Name) and c.func.id == use.func.id]
    sides = {}
    for call in uses:
        guard = s._direct_guard(call)
        if isinstance(guard, ast.If):
            in_body = any(call in ast.walk(part) for part in guard.body)
            sides.setdefault(id(guard), set()).add(in_body)
    return any(len(found) == 2 for found in sides.values())
