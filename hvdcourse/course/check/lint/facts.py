"""What a training script does, as the rules need it: its framework, optimizers, ``fit`` calls
with their callbacks, training loops and data (lesson: Converting a Keras MNIST script to Horovod).

Built once per script from :class:`~hvdcourse.course.check.lint.source.Script`; every name is
compared after the script's imports are resolved, so ``tf.keras.optimizers.Adam``,
``keras.optimizers.Adam`` and ``from tensorflow.keras.optimizers import Adam`` are one optimizer.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from hvdcourse.course.check.lint.source import (
    DDP_CLASSES,
    FUNCTIONS,
    OTHER_FRAMEWORKS,
    Script,
    last_name,
)

KERAS_PREFIXES = (
    "tensorflow.keras.",
    "tensorflow.python.keras.",
    "tf_keras.",
    "keras.",
    "tensorflow.",  # tf.optimizers, tf.summary, tf.train
)
# optimizer classes and the course's rule for each (lesson 05's box: linear for SGD, square
# root for Adam and the other adaptive optimizers)
LINEAR = {"SGD", "ASGD"}
SQRT = {
    "Adam",
    "AdamW",
    "Adamax",
    "Nadam",
    "NAdam",
    "RAdam",
    "RMSprop",
    "Adagrad",
    "Adadelta",
    "Ftrl",
    "Lion",
    "Adafactor",
    "SparseAdam",
}
# Keras optimizers with a ``momentum`` attribute (a Python number from TensorFlow 2.11 on)
WITH_MOMENTUM = {"SGD", "RMSprop"}
COURSE = "hvdcourse.examples."
KERAS_MODELS = ("Sequential", "Model", "models.Sequential", "models.Model", "models.load_model")
TORCH_LOOP_CALLS = {"backward", "step"}
TAPE_CALLS = {"gradient", "apply_gradients"}


def keras_member(full: str | None) -> str | None:
    """``optimizers.Adam`` for ``tensorflow.keras.optimizers.Adam``, ``keras.optimizers.Adam``,
    ``tf_keras.optimizers.Adam``; None for a name outside Keras (and TensorFlow)."""
    if not full:
        return None
    for prefix in KERAS_PREFIXES:
        if full.startswith(prefix):
            rest = full[len(prefix) :]
            return rest[len("keras.") :] if rest.startswith("keras.") else rest
    return None


@dataclass
class Optimizer:
    """An optimizer the script builds: its call, class name and framework (``keras`` or ``torch``)."""

    call: ast.Call
    name: str
    framework: str

    @property
    def family(self) -> str | None:
        if self.name in LINEAR:
            return "linear"
        if self.name in SQRT:
            return "sqrt"
        return None


@dataclass
class Element:
    """One callback of a ``fit``: the expression placed in the list, where it was placed (the list
    literal's element, or the ``append`` call), and the call that made it when the script shows it."""

    node: ast.AST
    site: ast.AST
    made_by: ast.Call | None
    kind: str | None = None  # broadcast, average, warmup, checkpoint, log, monitor, elastic...


@dataclass
class Callbacks:
    """The callbacks one ``fit`` gets, in order; ``unknown``: some of them the script does not show;
    ``where``: the line to name for a missing one (the list, or the ``fit`` call)."""

    elements: list = field(default_factory=list)
    unknown: list = field(default_factory=list)
    where: ast.AST | None = None


def _identifiers(tree) -> set:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, FUNCTIONS + (ast.ClassDef,)):
            names.add(node.name)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[-1])
    return names


class Facts:
    """The facts of one script that several rules share."""

    def __init__(self, script: Script):
        self.script = script
        s = script
        self.identifiers = _identifiers(s.tree)
        self.horovod = {
            flavour
            for flavour, prefix in (
                ("keras", "horovod.tensorflow"),
                ("keras", "horovod.keras"),
                ("torch", "horovod.torch"),
            )
            if s.imports(prefix)
        }
        self.ddp = s.imports("torch.distributed") or any(
            s.call_name(c) in DDP_CLASSES for c in s.calls
        )
        self.uses_tensorflow = any(
            s.imports(m) for m in ("tensorflow", "keras", "tf_keras", "horovod.tensorflow")
        )
        self.uses_torch = s.imports("torch") or s.imports("horovod.torch")
        self.other = next(
            (label for prefix, label in OTHER_FRAMEWORKS.items() if s.imports(prefix)), None
        )
        if self.other is None and any(
            (keras_member(s.call_name(c)) or "").startswith("distribute.") for c in s.calls
        ):
            self.other = "tf.distribute's strategies"
        self.distributed = bool(self.horovod or self.ddp)
        if "torch" in self.horovod:
            self.flavour = "torch"
        elif "keras" in self.horovod:
            self.flavour = "keras"
        elif self.ddp:
            self.flavour = "ddp"
        elif self.uses_torch:
            self.flavour = "torch"  # a single-worker script: converted with Horovod, lesson 09
        elif self.uses_tensorflow:
            self.flavour = "keras"
        else:
            self.flavour = None
        self.elastic = any(
            (m := s.horovod_member(c.func)) and m[1].startswith("elastic.")
            for c in s.calls
            if isinstance(c.func, (ast.Name, ast.Attribute))
        ) or any(
            (m := s.horovod_member(d)) and m[1].startswith("elastic.")
            for f in ast.walk(s.tree)
            if isinstance(f, FUNCTIONS)
            for d in f.decorator_list
        )
        self.optimizers = [o for o in (self._optimizer(c) for c in s.calls) if o]
        self.fits = [
            c
            for c in s.method_calls("fit")
            if self.uses_tensorflow and s.qualname(c.func.value) is None
        ]
        self.compiles = [c for c in s.method_calls("compile") if self.uses_tensorflow]
        self.loops = self._training_loops()

    def model_calls(self, method: str) -> list:
        """Keras' ``model.method(...)`` calls on a model the script compiles or builds (not a
        module's function of that name, as the course's ``training.evaluate``, nor an
        Estimator's)."""
        if not self.uses_tensorflow:
            return []
        s = self.script
        compiled = {last_name(s.receiver(c)) for c in s.method_calls("compile")}
        found = []
        for call in s.method_calls(method):
            owner = call.func.value
            if s.qualname(owner) is not None:
                continue  # a module's function: training.evaluate(...)
            if last_name(owner) in compiled or s.reaches(owner, self._is_keras_model):
                found.append(call)
        return found

    def _is_keras_model(self, node) -> bool:
        return isinstance(node, ast.Call) and (
            keras_member(self.script.call_name(node)) in KERAS_MODELS
            or self.course(node, "model.build_model")
        )

    # ------------------------------------------------------------------ names
    def hvd(self, call: ast.Call, *members: str) -> bool:
        """Whether ``call`` calls one of Horovod's ``members`` (any flavour)."""
        if not isinstance(call, ast.Call):
            return False
        member = self.script.horovod_member(call.func)
        return bool(member) and member[1] in members

    def hvd_ref(self, node, *members: str) -> bool:
        """Whether ``node`` names one of Horovod's ``members`` (called or passed as a value)."""
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return False
        member = self.script.horovod_member(node)
        return bool(member) and member[1] in members

    def keras(self, call, *members: str) -> bool:
        if not isinstance(call, ast.Call):
            return False
        return keras_member(self.script.call_name(call)) in members

    def course(self, call, *members: str) -> bool:
        """Whether ``call`` calls the course's helper ``module.function`` (hvdcourse.examples)."""
        if not isinstance(call, ast.Call):
            return False
        full = self.script.call_name(call)
        return full.startswith(COURSE) and full[len(COURSE) :] in members

    def _optimizer(self, call: ast.Call) -> Optimizer | None:
        full = self.script.call_name(call)
        member = keras_member(full)
        if member and member.startswith("optimizers."):
            name = member.split(".")[-1]
            if name in LINEAR | SQRT:
                return Optimizer(call, name, "keras")
        if full.startswith("torch.optim.") and not full.startswith("torch.optim.lr_scheduler"):
            name = full.split(".")[-1]
            if name in LINEAR | SQRT:
                return Optimizer(call, name, "torch")
        return None

    # ------------------------------------------------------------------ callbacks of fit
    def callbacks(self, fit: ast.Call) -> Callbacks:
        s = self.script
        found = Callbacks(where=fit)
        value = s.keyword(fit, "callbacks")
        if value is None:
            return found
        found.where = value
        if isinstance(value, ast.Name):
            bindings, _ = s.bindings(value.id, value)
            before = [b for b in bindings if b[0] <= fit.lineno]
            if before:
                found.where = before[0][2]
        self._expand(value, found, set(), fit)
        for element in found.elements:
            element.kind = self.callback_kind(element.made_by)
        return found

    def _expand(self, node, found: Callbacks, seen: set, fit) -> None:
        s = self.script
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, (ast.List, ast.Tuple)):
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    self._expand(elt.value, found, seen, fit)
                else:
                    found.elements.append(Element(elt, elt, self._maker(elt)))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            self._expand(node.left, found, seen, fit)
            self._expand(node.right, found, seen, fit)
        elif isinstance(node, ast.IfExp):
            self._expand(node.body, found, seen, fit)
            self._expand(node.orelse, found, seen, fit)
        elif isinstance(node, ast.Call) and last_name(node.func) in ("list", "tuple"):
            for arg in node.args:
                self._expand(arg, found, seen, fit)
        elif isinstance(node, ast.Name):
            bindings, param = s.bindings(node.id, node)
            statement = s.statement_of(node)
            line = s.line_of(statement)
            earlier = [b for b in bindings if b[0] < line and b[2] is not statement]
            for _, value, _ in earlier:
                self._expand(value, found, seen, fit)
            if param and not earlier:
                values = s.param_values(node.id, param)
                if not values:
                    found.unknown.append(node)
                for value in values:
                    self._expand(value, found, seen, fit)
            if not earlier and not param:
                found.unknown.append(node)
            # list.append(x), list.extend(xs), list.insert(i, x) on the same name, before fit
            scope = s.scope_of(node)
            line = min((b[0] for b in earlier), default=0)
            for call in s.calls:
                target = s.receiver(call)
                if not (
                    isinstance(target, ast.Name)
                    and target.id == node.id
                    and s.scope_of(call) is scope
                    and line <= call.lineno <= fit.lineno
                    and id(call) not in seen
                ):
                    continue
                seen.add(id(call))
                method = call.func.attr
                if method == "append" and call.args:
                    arg = call.args[0]
                    found.elements.append(Element(arg, call, self._maker(arg)))
                elif method == "insert" and len(call.args) > 1:
                    arg = call.args[1]
                    found.elements.insert(0, Element(arg, call, self._maker(arg)))
                elif method == "extend" and call.args:
                    self._expand(call.args[0], found, seen, fit)
        elif isinstance(node, ast.Constant) and node.value is None:
            return
        else:
            found.unknown.append(node)

    def _maker(self, node) -> ast.Call | None:
        """The call that made the callback ``node`` (itself, or the value of the name it is)."""
        if isinstance(node, ast.Call):
            return node
        if isinstance(node, ast.Name):
            bindings, _ = self.script.bindings(node.id, node)
            for _, value, _ in reversed(bindings):
                if isinstance(value, ast.Call):
                    return value
        return None

    def callback_kind(self, call) -> str | None:
        """What a callback does, from the call that made it."""
        if call is None:
            return None
        if self.hvd(call, "callbacks.BroadcastGlobalVariablesCallback"):
            return "broadcast"
        if self.hvd(call, "callbacks.MetricAverageCallback"):
            return "average"
        if self.hvd(
            call, "callbacks.LearningRateWarmupCallback", "callbacks.LearningRateScheduleCallback"
        ):
            return "warmup"
        if self.hvd(call, "callbacks.BestModelCheckpoint"):
            return "checkpoint"
        member = (
            self.script.horovod_member(call.func)
            if isinstance(call.func, (ast.Name, ast.Attribute))
            else None
        )
        if member and member[1].startswith("elastic."):
            return "elastic"
        if self.keras(call, "callbacks.ModelCheckpoint"):
            return "checkpoint"
        if self.keras(call, "callbacks.TensorBoard", "callbacks.CSVLogger"):
            return "log"
        if self.keras(call, "callbacks.EarlyStopping", "callbacks.ReduceLROnPlateau"):
            return "monitor"
        # the course's EpochCheckpoint(...).callback()
        if last_name(call.func) == "callback":
            receiver = self.script.receiver(call)
            if receiver is not None and self.script.reaches(
                receiver, lambda n: self.course(n, "training.EpochCheckpoint")
            ):
                return "checkpoint"
        # the script's own callback class: what it derives from
        if isinstance(call.func, ast.Name):
            for cls in self.script.classes.get(call.func.id, []):
                for base in cls.bases:
                    kind = self.callback_kind(ast.Call(func=base, args=[], keywords=[]))
                    if kind:
                        return kind
        return None

    # ------------------------------------------------------------------ training loops
    def _training_loops(self) -> list:
        """``for``/``while`` loops whose body steps an optimizer (PyTorch's ``backward``/``step``,
        TensorFlow's ``tape.gradient``/``apply_gradients``, or the script's function that does),
        outermost first."""
        s = self.script
        self.stepping = stepping = {
            f.name
            for name, functions in s.functions.items()
            for f in functions
            if any(
                isinstance(n, ast.Call) and last_name(n.func) in TORCH_LOOP_CALLS | TAPE_CALLS
                for n in ast.walk(f)
            )
        }
        loops = []
        for node in ast.walk(s.tree):
            if not isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                continue
            calls = [n for b in node.body for n in ast.walk(b) if isinstance(n, ast.Call)]
            if any(
                (isinstance(c.func, ast.Attribute) and c.func.attr in TORCH_LOOP_CALLS | TAPE_CALLS)
                or (isinstance(c.func, ast.Name) and c.func.id in stepping)
                for c in calls
            ):
                loops.append(node)
        inner = [
            loop
            for loop in loops
            if not any(other is not loop and loop in ast.walk(other) for other in loops)
        ]
        return [loop for loop in loops if loop not in inner] + inner

    def innermost_loops(self) -> list:
        return [
            loop
            for loop in self.loops
            if not any(
                other is not loop and other in list(ast.walk(loop))[1:] for other in self.loops
            )
        ]

    # ------------------------------------------------------------------ writes and warm-ups
    def has_warmup(self) -> bool:
        words = {w.lower() for w in self.identifiers}
        if any("warmup" in w or "warm_up" in w for w in words):
            return True
        schedulers = {"LinearLR", "LambdaLR", "OneCycleLR", "SequentialLR", "ChainedScheduler"}
        return (
            bool(schedulers & self.identifiers)
            or "LearningRateScheduleCallback" in self.identifiers
        )
