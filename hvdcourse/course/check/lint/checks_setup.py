"""The rules of the set-up: Horovod started, the optimizer wrapped, rank 0's state broadcast, the
learning rate scaled and warmed up (lessons: Converting a Keras MNIST script to Horovod; PyTorch
with Horovod, and DDP).

Each ``check_*`` function reads a :class:`~hvdcourse.course.check.lint.facts.Facts` and adds what
it finds to a :class:`~hvdcourse.course.check.lint.rules.Report`.
"""

from __future__ import annotations

import ast
import re

from hvdcourse.course.check.lint.facts import WITH_MOMENTUM, Facts
from hvdcourse.course.check.lint.rules import Report
from hvdcourse.course.check.lint.source import DDP_CLASSES, DIST_COLLECTIVES, last_name

# Horovod calls that need no hvd.init() before them
NO_INIT = {
    "init",
    "is_initialized",
    "mpi_built",
    "gloo_built",
    "nccl_built",
    "ddl_built",
    "ccl_built",
    "cuda_built",
    "rocm_built",
    "mpi_enabled",
    "gloo_enabled",
    "mpi_threads_supported",
    "elastic.run",
    "Compression.fp16",
    "Compression.none",
}
DIST_NO_INIT = {"init_process_group", "is_initialized", "is_available", "is_torchelastic_launched"}


def _first_line(nodes) -> int:
    return min((n.lineno for n in nodes), default=1)


# ---------------------------------------------------------------------- missing-init
def check_init(f: Facts, report: Report) -> None:
    s = f.script
    if not f.distributed:
        imports = [
            n
            for n in ast.walk(s.tree)
            if isinstance(n, (ast.Import, ast.ImportFrom))
            and any(
                m.split(".")[0] in ("tensorflow", "keras", "tf_keras", "torch") for m in _modules(n)
            )
        ]
        first = min(imports, key=lambda n: n.lineno) if imports else s.tree
        framework = "PyTorch" if f.flavour == "torch" else "TensorFlow"
        report.finding(
            "missing-init",
            first,
            f"this {framework} script never starts Horovod: it trains one model on one worker, "
            "and N copies of it would train N models",
        )
        return
    if f.flavour in ("keras", "torch"):
        inits = [c for c in s.calls if f.hvd(c, "init")]
        uses = [
            c
            for c in s.calls
            if isinstance(c.func, (ast.Name, ast.Attribute))
            and (m := s.horovod_member(c.func))
            and m[1] not in NO_INIT
            and "." not in m[1]  # Horovod's own functions, not its subpackages' classes
        ]
        name = "hvd.init()"
    else:
        inits = [c for c in s.calls if s.dist_member(c.func) == "init_process_group"]
        uses = [
            c
            for c in s.calls
            if s.dist_member(c.func) in DIST_COLLECTIVES | {"get_rank", "get_world_size"}
        ]
        uses += [c for c in s.calls if s.call_name(c) in DDP_CLASSES]
        name = "init_process_group()"
    if not inits:
        if not uses and not (f.optimizers or f.fits or f.loops):
            return  # Horovod's helpers only (a data service, a driver): not a training script
        if uses:
            first = min(uses, key=lambda c: c.lineno)
            report.finding(
                "missing-init",
                first,
                f"{s.words(first.func)}() is called but the script never calls {name}",
            )
        else:
            report.finding("missing-init", 1, f"the script never calls {name}")
        return
    for use in uses:
        scope = s.scope_of(use)
        same = [i for i in inits if s.scope_of(i) is scope]
        if same and use.lineno < min(i.lineno for i in same):
            report.finding(
                "missing-init",
                use,
                f"{s.words(use.func)}() runs before {name} (line {min(i.lineno for i in same)})",
            )
            return
        if scope is s.tree and not same and all(s.scope_of(i) is not s.tree for i in inits):
            if not s.enclosing(use, (ast.If,)):
                report.finding(
                    "missing-init",
                    use,
                    f"{s.words(use.func)}() runs when the script starts, before {name} "
                    f"(line {inits[0].lineno}, inside a function)",
                )
                return


def _modules(node) -> list:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    return [node.module or ""]


# ---------------------------------------------------------------------- unwrapped-optimizer
def _wrapped(f: Facts, node) -> bool:
    """Whether the optimizer value ``node`` went through Horovod's ``DistributedOptimizer``."""
    return f.script.reaches(node, lambda n: f.hvd(n, "DistributedOptimizer"))


def averages_gradients_by_hand(f: Facts) -> bool:
    """Whether the script allreduces the gradients itself (``p.grad = hvd.allreduce(p.grad)``)."""
    s = f.script
    for call in s.calls:
        member = (
            s.horovod_member(call.func)
            if isinstance(call.func, (ast.Name, ast.Attribute))
            else None
        )
        name = member[1] if member else s.dist_member(call.func) or ""
        if "allreduce" in name or name == "all_reduce":
            if any(
                isinstance(n, ast.Attribute) and n.attr in ("grad", "grads")
                for a in call.args
                for n in ast.walk(a)
            ):
                return True
            if any("grad" in ast.unparse(a).lower() for a in call.args):
                return True
    return False


def check_optimizer(f: Facts, report: Report) -> None:
    s = f.script
    if averages_gradients_by_hand(f):
        return
    if f.flavour == "ddp":
        if not any(s.call_name(c) in DDP_CLASSES for c in s.calls) and f.optimizers:
            first = f.optimizers[0].call
            report.finding(
                "unwrapped-optimizer",
                first,
                f"{s.words(first.func)}(...) updates a model that is never wrapped in "
                "DistributedDataParallel: each rank applies its own gradients",
            )
        return
    tape = any(f.hvd(c, "DistributedGradientTape") for c in s.calls)
    if f.flavour == "keras":
        for compile_call in f.compiles:
            value = s.keyword(compile_call, "optimizer", 0)
            if value is None:
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                report.finding(
                    "unwrapped-optimizer",
                    compile_call,
                    f"model.compile gets the optimizer by its name, {value.value!r}: Horovod "
                    "cannot wrap a name, so the ranks' gradients are never averaged",
                )
                continue
            if _wrapped(f, value) or _wrapped_after_use(f, report, value, compile_call):
                continue
            if tape:
                continue
            if not any(isinstance(n, ast.Call) for n in s.sources(value)):
                continue  # an optimizer the script does not show
            report.finding(
                "unwrapped-optimizer",
                compile_call,
                f"model.compile gets the optimizer {s.words(value)!r}, which no "
                "hvd.DistributedOptimizer wraps: each rank applies its own gradients",
            )
        if not f.compiles and not tape:
            for call in s.method_calls("apply_gradients"):
                optimizer = s.receiver(call)
                if optimizer is not None and not _wrapped(f, optimizer):
                    report.finding(
                        "unwrapped-optimizer",
                        call,
                        "apply_gradients applies this rank's own gradients: neither "
                        "DistributedGradientTape nor DistributedOptimizer averages them",
                    )
                    break
        return
    # Horovod with PyTorch (or a single-worker PyTorch script)
    for call in s.method_calls("step"):
        optimizer = s.receiver(call)
        if optimizer is None or not s.reaches(
            optimizer, lambda n: any(n is o.call for o in f.optimizers)
        ):
            continue  # a scheduler's step, or an optimizer the script does not show
        if _wrapped(f, optimizer):
            continue
        made = next(
            o.call for o in f.optimizers if s.reaches(optimizer, lambda n, o=o: n is o.call)
        )
        report.finding(
            "unwrapped-optimizer",
            made,
            f"{s.words(made.func)}(...) steps with this rank's own gradients: it is never "
            "wrapped in hvd.DistributedOptimizer",
        )
        return


def _wrapped_after_use(f: Facts, report: Report, value, compile_call) -> bool:
    """``model.compile(optimizer=opt)`` and only later ``opt = hvd.DistributedOptimizer(opt)``:
    reported at the wrapper, and True."""
    s = f.script
    if not isinstance(value, ast.Name):
        return False
    bindings, _ = s.bindings(value.id, value)
    after = [b for b in bindings if b[0] > compile_call.lineno]
    wrap = next((b for b in after if f.hvd(b[1], "DistributedOptimizer")), None)
    if wrap is None:
        return False
    report.finding(
        "unwrapped-optimizer",
        wrap[2],
        f"{value.id} is wrapped after model.compile (line {compile_call.lineno}) took the "
        "unwrapped optimizer: the model trains without averaging",
    )
    return True


# ---------------------------------------------------------------------- missing-broadcast
BROADCASTS = {
    "broadcast_variables",
    "broadcast_global_variables",
    "broadcast_parameters",
    "broadcast_optimizer_state",
    "callbacks.BroadcastGlobalVariablesCallback",
    "BroadcastGlobalVariablesHook",
}


def check_broadcast(f: Facts, report: Report) -> None:
    s = f.script
    if f.flavour == "ddp" or f.elastic:
        return  # DDP's wrapper broadcasts; an elastic state syncs rank 0's copy
    referenced = {
        m[1]
        for n in ast.walk(s.tree)
        if isinstance(n, (ast.Name, ast.Attribute))
        and isinstance(n.ctx, ast.Load)
        and (m := s.horovod_member(n))
    }
    if f.flavour == "torch":
        target = _torch_anchor(f)
        if target is None:
            return
        seeded = _same_seed(f) if f.distributed else None
        if "broadcast_parameters" not in referenced:
            if seeded is not None:
                report.note(
                    "missing-broadcast",
                    target,
                    f"every rank seeds alike (line {seeded.lineno}), so the ranks may start from "
                    "the same weights; hvd.broadcast_parameters and "
                    "hvd.broadcast_optimizer_state make it sure, and carry a restored checkpoint "
                    "to every rank",
                )
                return
            report.finding(
                "missing-broadcast",
                target,
                "rank 0's weights are never broadcast (hvd.broadcast_parameters): each rank "
                "starts from its own random weights and trains its own model",
            )
            return
        # a fresh optimizer is alike on every rank: its state needs a broadcast only when
        # some ranks alone restore one (lesson 09: rank 0 restores, then broadcasts)
        restored = _restored_on_some_ranks(f)
        if "broadcast_optimizer_state" not in referenced and restored is not None:
            report.finding(
                "missing-broadcast",
                target,
                f"the optimizer's state is restored on some ranks only (line {restored.lineno}) "
                "and never broadcast (hvd.broadcast_optimizer_state): the other ranks keep a "
                "fresh state",
            )
        return
    if referenced & BROADCASTS - {"callbacks.BroadcastGlobalVariablesCallback"}:
        _check_early_broadcast(f, report)
        return
    for fit in f.fits:
        callbacks = f.callbacks(fit)
        if any(e.kind == "broadcast" for e in callbacks.elements):
            continue
        if callbacks.unknown:
            report.note(
                "missing-broadcast",
                callbacks.where,
                f"the callbacks of fit include {s.words(callbacks.unknown[0])}, which the script "
                "does not show: check that BroadcastGlobalVariablesCallback(0) is among them",
            )
            continue
        report.finding(
            "missing-broadcast",
            callbacks.where,
            "no BroadcastGlobalVariablesCallback(0) among fit's callbacks: each rank starts "
            "from its own random weights and trains its own model",
        )
    if not f.fits and f.loops:
        report.finding(
            "missing-broadcast",
            f.loops[0],
            "the training loop starts without hvd.broadcast_variables of rank 0's weights: each "
            "rank trains its own model",
        )


def _restored_on_some_ranks(f: Facts):
    """``if hvd.rank() == 0: optimizer.load_state_dict(...)``: the call, or None."""
    s = f.script
    for call in s.method_calls("load_state_dict"):
        owner = s.receiver(call)
        if s.rank_guard(call) is None:
            continue
        if s.reaches(owner, lambda n: any(n is o.call for o in f.optimizers)) or (
            "optim" in (last_name(owner) or "").lower()
        ):
            return call
    return None


def _same_seed(f: Facts):
    """``torch.manual_seed(1234)``: a seed that does not depend on the rank, or None."""
    s = f.script
    for call in s.calls:
        if last_name(call.func) in ("manual_seed", "set_random_seed", "seed") and call.args:
            if s.qualname(call.func) and not s.depends_on_rank(call.args[0]):
                if not s.enclosing(call, (ast.For, ast.While)):
                    return call
    return None


def _torch_anchor(f: Facts):
    """Where a PyTorch script's missing broadcast goes: the wrapper, else the optimizer."""
    s = f.script
    wraps = [c for c in s.calls if f.hvd(c, "DistributedOptimizer")]
    if wraps:
        return wraps[0]
    torch_optimizers = [o.call for o in f.optimizers if o.framework == "torch"]
    return torch_optimizers[0] if torch_optimizers else None


def _check_early_broadcast(f: Facts, report: Report) -> None:
    """``hvd.broadcast_variables(optimizer.variables(), ...)`` before the optimizer has any."""
    s = f.script
    for call in s.calls:
        if not f.hvd(call, "broadcast_variables"):
            continue
        arg = s.keyword(call, "variables", 0)
        if arg is None:
            continue
        owner = None
        for sub in ast.walk(arg):
            if isinstance(sub, ast.Attribute) and sub.attr == "variables":
                candidate = sub.value
                if any(
                    s.reaches(candidate, lambda n, o=o: n is o.call)
                    for o in f.optimizers
                    if o.framework == "keras"
                ):
                    owner = candidate
        if owner is None or not isinstance(owner, ast.Name):
            continue
        scope = s.scope_of(call)
        built = [
            c
            for c in s.calls
            if isinstance(c.func, ast.Attribute)
            and c.func.attr in ("build", "apply_gradients", "minimize", "fit")
            and c.lineno < call.lineno
            and (
                (isinstance(c.func.value, ast.Name) and c.func.value.id == owner.id)
                or c.func.attr == "fit"
            )
        ]
        in_loop = any(
            isinstance(p, (ast.For, ast.While)) for p in s.enclosing(call, (ast.For, ast.While))
        )
        if not built and not in_loop and s.scope_of(call) is scope:
            report.finding(
                "early-broadcast",
                call,
                f"{owner.id}'s variables are broadcast before the optimizer has created them "
                "(TensorFlow 2.11+ creates them at its first step): the broadcast sends nothing",
            )
            return


# ---------------------------------------------------------------------- the learning rate
def lr_argument(optimizer):
    """The expression of the optimizer's learning rate, or None for the default."""
    call = optimizer.call
    for kw in call.keywords:
        if kw.arg in ("learning_rate", "lr"):
            return kw.value
    position = 0 if optimizer.framework == "keras" else 1
    if position < len(call.args) and not isinstance(call.args[position], ast.Starred):
        return call.args[position]
    return None


def scaling(f: Facts, expr) -> str:
    """How ``expr`` scales with the number of workers: ``none``, ``linear``, ``sqrt``, or
    ``other`` (it depends on the number in a way the tool does not read), or ``sgd``/``adam`` for
    the course's ``training.scaled_lr`` with that rule."""
    s = f.script
    if expr is None:
        return "none"
    nodes = s.sources(expr)
    sized = [n for n in nodes if s.is_size_call(n)]
    if not sized:
        return "none"
    for node in nodes:
        if f.course(node, "training.scaled_lr") and any(
            s.depends_on_size(a)
            for a in node.args[1:2] + [k.value for k in node.keywords if k.arg == "workers"]
        ):
            rule = s.keyword(node, "optimizer", 2)
            if rule is None:
                return "adam"
            if isinstance(rule, ast.Constant) and isinstance(rule.value, str):
                return rule.value.lower()
            return "other"
    for node in nodes:
        if isinstance(node, ast.Call) and last_name(node.func) == "sqrt" and node.args:
            if s.depends_on_size(node.args[0]):
                return "sqrt"
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Pow)
            and s.depends_on_size(node.left)
        ):
            exponent = node.right
            if isinstance(exponent, ast.Constant) and exponent.value == 0.5:
                return "sqrt"
            if isinstance(exponent, ast.BinOp) and ast.unparse(exponent).replace(" ", "") in (
                "1/2",
                "1.0/2",
                "1/2.0",
            ):
                return "sqrt"
    for node in nodes:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if s.depends_on_size(node.left) or s.depends_on_size(node.right):
                return "linear"
    return "other"


def divides_batch(f: Facts) -> ast.AST | None:
    """The line where the script divides its batch size by the number of workers (the effective
    batch stays fixed, so the rate stays too), or None."""
    s = f.script
    for node in ast.walk(s.tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv))):
            continue
        holder = s.parent.get(node)
        names = [ast.unparse(node.left)]
        if isinstance(holder, ast.keyword) and holder.arg:
            names.append(holder.arg)
        statement = s.statement_of(node)
        if isinstance(statement, ast.Assign):
            names += [ast.unparse(t) for t in statement.targets]
        if any(_names_batch_size(name) for name in names) and s.depends_on_size(node.right):
            return node
    return None


def _names_batch_size(name: str) -> bool:
    """``batch_size``, ``global_batch``, ``global_bs``: a batch's size; not a count of batches or
    steps (``num_batches // hvd.size()`` divides the steps, which the course's rule does too)."""
    name = name.lower()
    if re.search(r"(^|[^a-z])bs($|[^a-z])", name):
        return True
    return (
        "batch" in name
        and "batches" not in name
        and not any(word in name for word in ("step", "num_batch", "n_batch", "nb_batch"))
    )


RULE_OF = {"linear": "linear", "sgd": "linear", "sqrt": "sqrt", "adam": "sqrt"}


def check_learning_rate(f: Facts, report: Report) -> None:
    s = f.script
    adasum = [n for n in ast.walk(s.tree) if isinstance(n, ast.Attribute) and n.attr == "Adasum"]
    if adasum:
        report.note(
            "unscaled-lr",
            adasum[0],
            "the script can use Adasum, which combines gradients without the course's "
            "learning-rate rules: its rate is not checked",
        )
        return
    divided = divides_batch(f)
    scaled_any = False
    for optimizer in f.optimizers:
        expr = lr_argument(optimizer)
        how = scaling(f, expr)
        where = optimizer.call
        if how == "none":
            if divided is None:
                what = (
                    f"{optimizer.name}'s learning rate ({s.words(expr)}) does not grow with the "
                    "number of workers, though each step averages N times more examples"
                    if expr is not None
                    else f"{optimizer.name} keeps its default learning rate, which does not grow "
                    "with the number of workers"
                )
                report.finding("unscaled-lr", where, what)
            continue
        scaled_any = True
        if divided is not None:
            report.finding(
                "lr-rule",
                where,
                f"the script divides the batch by the number of workers (line {divided.lineno}) "
                f"and also scales {optimizer.name}'s rate: the effective batch did not grow",
            )
            continue
        rule = RULE_OF.get(how)
        wanted = optimizer.family
        if rule and wanted and rule != wanted:
            names = {"linear": "linearly (x N)", "sqrt": "by the square root of N"}
            report.finding(
                "lr-rule",
                where,
                f"{optimizer.name}'s rate is scaled {names[rule]}; the course's rule for "
                f"{optimizer.name} is {names[wanted]}",
            )
    if scaled_any and not f.has_warmup() and not f.elastic:
        first = next(o.call for o in f.optimizers if scaling(f, lr_argument(o)) != "none")
        report.finding(
            "missing-warmup",
            first,
            "the scaled rate is used from the very first step, on weights that are still random",
        )
    _check_momentum_correction(f, report)


def _check_momentum_correction(f: Facts, report: Report) -> None:
    s = f.script
    keras = [o for o in f.optimizers if o.framework == "keras"]
    for call in s.calls:
        if not f.hvd(
            call, "callbacks.LearningRateWarmupCallback", "callbacks.LearningRateScheduleCallback"
        ):
            continue
        value = s.keyword(call, "momentum_correction")
        if isinstance(value, ast.Constant) and value.value is False:
            continue
        if value is not None and not isinstance(value, ast.Constant):
            continue
        new = [o for o in keras if ".legacy." not in s.call_name(o.call)]
        with_momentum = [o for o in new if o.name in WITH_MOMENTUM]
        if with_momentum:
            report.finding(
                "momentum-correction",
                call,
                f"the warm-up corrects the momentum of {with_momentum[0].name} "
                f"(line {with_momentum[0].call.lineno}), a Python number in TensorFlow 2.11 and "
                "later, which Horovod 0.28.1 cannot write",
            )
        elif not keras:
            report.note(
                "momentum-correction",
                call,
                "the script does not show which optimizer the warm-up drives; with SGD or "
                "RMSprop of TensorFlow 2.11+ pass momentum_correction=False",
            )
