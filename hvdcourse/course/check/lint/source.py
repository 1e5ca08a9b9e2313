"""A training script as ``hvdcourse-lint`` reads it (lesson: Converting a Keras MNIST script to Horovod).

:class:`Script` parses the source once and answers the questions every rule asks:

* **what a name means**: the script's own imports and aliases resolve a call to its full name
  (``hvd.DistributedOptimizer`` after ``import horovod.torch as hvd`` is
  ``horovod.torch.DistributedOptimizer``; ``from horovod.tensorflow.keras import callbacks as cb``
  makes ``cb.MetricAverageCallback`` Horovod's; ``Dist = hvd.DistributedOptimizer`` is an alias too);
* **where a value comes from**: :meth:`Script.sources` follows a value back through the assignments
  of its scope (and of the enclosing ones), the arguments of the calls that made it, the bodies of
  the script's own functions and, for a parameter, its default and the arguments of the script's
  calls: what the rules search for rank-dependent, sharded or averaged values;
* **on which ranks a line runs**: :meth:`Script.rank_guard` finds the ``if`` on the rank around it.

Nothing is run and nothing is imported: a value the script gets from another module is opaque, and
a rule that cannot see far enough says "cannot tell" instead of guessing.
"""

from __future__ import annotations

import ast
from collections import defaultdict

# the Horovod flavours and PyTorch's collectives, by module
HOROVOD_KERAS = ("horovod.tensorflow.keras", "horovod.keras")
HOROVOD_TF = ("horovod.tensorflow",)
HOROVOD_TORCH = ("horovod.torch",)
TORCH_DIST = ("torch.distributed",)
DDP_CLASSES = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.nn.DistributedDataParallel",
)
# PyTorch's collectives (every rank of the group must call them)
DIST_COLLECTIVES = {
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_object",
    "all_gather_into_tensor",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "broadcast_object_list",
    "new_group",
}
# frameworks the rules do not cover: their names start with these
OTHER_FRAMEWORKS = {
    # a driver and the workers' function in one file: which lines run on the ranks is not visible
    "horovod.spark": "Horovod on Spark",
    "horovod.ray": "Horovod on Ray",
    "ray.train": "Ray Train",
    "ray.air": "Ray Train",
    "tensorflow.distribute": "tf.distribute's strategies",
    "tensorflow.keras.utils.experimental.DatasetCreator": "tf.distribute's strategies",
    "pytorch_lightning": "PyTorch Lightning",
    "lightning": "PyTorch Lightning",
    "accelerate": "Hugging Face Accelerate",
    "deepspeed": "DeepSpeed",
    "torch.distributed.fsdp": "PyTorch FSDP",
    # its own loop, launched by torchrun, DDP inside: none of the script's lines shows it
    "transformers.Trainer": "Hugging Face's Trainer",
    "transformers.Seq2SeqTrainer": "Hugging Face's Trainer",
}

RANK_ENV = {
    "RANK",
    "LOCAL_RANK",
    "HOROVOD_RANK",
    "HOROVOD_LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
}
LOCAL_RANK_ENV = {
    "LOCAL_RANK",
    "HOROVOD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "MPI_LOCALRANKID",
}
SIZE_ENV = {"WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}
# names that mean the rank or the size when the script does not say where they come from (a
# function's parameter, an argparse option)
RANK_NAMES = {"rank", "global_rank", "world_rank", "my_rank", "local_rank", "localrank", "proc_id"}
LOCAL_RANK_NAMES = {"local_rank", "localrank", "gpu", "gpu_id", "device_id", "local_gpu"}
SIZE_NAMES = {"size", "world_size", "num_workers", "n_workers", "workers", "nprocs", "num_ranks"}

# calls whose value is the rank, the local rank or the number of workers (after the flavour prefix)
HVD_RANK = {"rank", "local_rank", "cross_rank"}
HVD_LOCAL_RANK = {"local_rank"}
HVD_SIZE = {"size"}
DIST_RANK = {"get_rank", "get_node_local_rank"}
DIST_SIZE = {"get_world_size"}
OTHER_RANK = {
    "hvdcourse.runtime.ranks.launcher_rank",
    "hvdcourse.runtime.ranks.launcher_local_rank",
    "hvdcourse.runtime.ranks.announced_rank",
    "mpi4py.MPI.COMM_WORLD.Get_rank",
    "mpi4py.MPI.COMM_WORLD.rank",
}
OTHER_LOCAL_RANK = {"hvdcourse.runtime.ranks.launcher_local_rank"}
OTHER_SIZE = {
    "hvdcourse.runtime.ranks.launcher_size",
    "mpi4py.MPI.COMM_WORLD.Get_size",
    "mpi4py.MPI.COMM_WORLD.size",
}

SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def last_name(node) -> str:
    """``shard`` for ``data.shard``, ``x`` for ``x``; ``""`` for anything else."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def env_key(node) -> str | None:
    """The variable ``os.environ["X"]``, ``os.environ.get("X")`` or ``os.getenv("X")`` reads."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        if last_name(node.value) == "environ" and isinstance(node.slice.value, str):
            return node.slice.value
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        name = last_name(node.func)
        owner = node.func.value if isinstance(node.func, ast.Attribute) else None
        if name == "getenv" or (
            name == "get" and owner is not None and last_name(owner) == "environ"
        ):
            value = node.args[0].value
            return value if isinstance(value, str) else None
    return None


class Script:
    """One parsed script: imports, aliases, assignments, functions and their calls."""

    def __init__(self, text: str, path: str = "<script>"):
        self.text, self.path = text, path
        self.tree = ast.parse(text, filename=path)
        self.lines = text.splitlines()
        self._encoded = [line.encode("utf-8") for line in self.lines]
        self.parent = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.aliases = {}  # local name -> full dotted name (imports, then name = module.thing)
        self.star_imports = []
        self.functions = defaultdict(list)  # name -> [FunctionDef] (the script's own)
        self.classes = defaultdict(list)  # name -> [ClassDef]
        self.assigned = defaultdict(list)  # (scope, name) -> [(line, value, statement)]
        self.params = {}  # (scope, name) -> (FunctionDef, index or None, default or None)
        self.calls = []  # every Call node, in source order
        self._read()
        self._sources_cache = {}
        self._rank_cache = {}

    # ------------------------------------------------------------------ reading
    def _read(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:  # import horovod.torch binds horovod
                        top = alias.name.split(".")[0]
                        self.aliases.setdefault(top, top)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name == "*":
                        self.star_imports.append(node)
                        continue
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, FUNCTIONS):
                self.functions[node.name].append(node)
                self._read_params(node)
            elif isinstance(node, ast.Lambda):
                self._read_params(node)
            elif isinstance(node, ast.ClassDef):
                self.classes[node.name].append(node)
            elif isinstance(node, ast.Call):
                self.calls.append(node)
        self.calls.sort(key=lambda c: (c.lineno, c.col_offset))
        self.imported = {
            name
            for node in ast.walk(self.tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for name in _imported_modules(node)
        }
        for node in ast.walk(self.tree):
            self._read_binding(node)
        # name = module.thing (bound once): an alias
        for (scope, name), bindings in list(self.assigned.items()):
            if name in self.aliases or len(bindings) != 1:
                continue
            value = bindings[0][1]
            if isinstance(value, (ast.Attribute, ast.Name)):
                full = self.qualname(value)
                if full and "." in full and full.split(".")[0] in _KNOWN_ROOTS:
                    self.aliases[name] = full

    def _read_params(self, node) -> None:
        args = node.args
        positional = args.posonlyargs + args.args
        defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
        for index, (arg, default) in enumerate(zip(positional, defaults)):
            self.params[(node, arg.arg)] = (node, index, default)
        for arg, default in zip(args.kwonlyargs, args.kw_defaults):
            self.params[(node, arg.arg)] = (node, None, default)
        for arg in (args.vararg, args.kwarg):
            if arg is not None:
                self.params[(node, arg.arg)] = (node, None, None)

    def _bind(self, target, value, statement) -> None:
        scope = self.scope_of(statement)
        if isinstance(target, ast.Name):
            self.assigned[(scope, target.id)].append((statement.lineno, value, statement))
        elif isinstance(target, (ast.Tuple, ast.List)):
            pairs = (
                zip(target.elts, value.elts)
                if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                else ((elt, value) for elt in target.elts)
            )
            for elt, part in pairs:
                self._bind(elt.value if isinstance(elt, ast.Starred) else elt, part, statement)

    def _read_binding(self, node) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._bind(target, node.value, node)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self._bind(node.target, node.value, node)
        elif isinstance(node, ast.AugAssign):
            self._bind(node.target, ast.BinOp(node.target, node.op, node.value), node)
        elif isinstance(node, ast.NamedExpr):
            self._bind(node.target, node.value, node)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            holder = node if not isinstance(node, ast.comprehension) else self.parent[node]
            self._bind(node.target, node.iter, holder)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, item.context_expr, node)

    # ------------------------------------------------------------------ names
    def qualname(self, node) -> str | None:
        """The full dotted name of a name or attribute chain, through the script's imports."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):  # hvd.callbacks.X()  -> no; tf.keras.optimizers.SGD -> yes
            return None
        return None

    def call_name(self, call: ast.Call) -> str:
        """The full name of what ``call`` calls, or its last name when the script does not say."""
        return self.qualname(call.func) or ""

    def horovod_member(self, node) -> tuple[str, str] | None:
        """``("keras"|"tf"|"torch", member)`` when ``node`` names a Horovod function or class."""
        full = self.qualname(node)
        if not full:
            return None
        for flavour, modules in (
            ("keras", HOROVOD_KERAS),
            ("tf", HOROVOD_TF),
            ("torch", HOROVOD_TORCH),
        ):
            for module in modules:
                if full.startswith(module + "."):
                    return flavour, full[len(module) + 1 :]
        return None

    def dist_member(self, node) -> str | None:
        """The member of ``torch.distributed`` that ``node`` names."""
        full = self.qualname(node)
        if full and full.startswith("torch.distributed.") and ".fsdp" not in full:
            return full[len("torch.distributed.") :]
        return None

    def imports(self, prefix: str) -> bool:
        """Whether the script imports ``prefix`` or something inside it."""
        return any(
            name == prefix or name.startswith(prefix + ".")
            for name in self.imported | set(self.aliases.values())
        )

    # ------------------------------------------------------------------ scopes
    def scope_of(self, node):
        """The function (or lambda, or the module) whose local names ``node`` uses."""
        current = self.parent.get(node)
        while current is not None and not isinstance(current, SCOPES):
            current = self.parent.get(current)
        return current if current is not None else self.tree

    def enclosing(self, node, kinds) -> list:
        """The ancestors of ``node`` of the given kinds, innermost first."""
        found, current = [], self.parent.get(node)
        while current is not None:
            if isinstance(current, kinds):
                found.append(current)
            current = self.parent.get(current)
        return found

    def statement_of(self, node):
        current = node
        while current is not None and not isinstance(current, ast.stmt):
            current = self.parent.get(current)
        return current

    def bindings(self, name: str, at):
        """The assignments of ``name`` visible from node ``at``: ``[(line, value, statement)]`` and
        the parameter entry, from the innermost scope that binds it."""
        scope = self.scope_of(at) if not isinstance(at, SCOPES) else at
        while True:
            found = self.assigned.get((scope, name), [])
            param = self.params.get((scope, name))
            if found or param:
                return found, param
            if scope is self.tree:
                return [], None
            scope = self.scope_of(scope)

    def function_calls(self, function) -> list:
        """The calls of the script's own ``function`` (by its name)."""
        return [
            call
            for call in self.calls
            if isinstance(call.func, ast.Name) and call.func.id == function.name
        ]

    def param_values(self, name: str, param) -> list:
        """What a parameter may hold: its default and the matching arguments of the script's calls."""
        function, index, default = param
        values = [default] if default is not None else []
        if isinstance(function, ast.Lambda):
            return values
        for call in self.function_calls(function):
            if index is not None and index < len(call.args):
                arg = call.args[index]
                if not isinstance(arg, ast.Starred):
                    values.append(arg)
            values += [kw.value for kw in call.keywords if kw.arg == name]
        return values

    def unknown_param(self, param) -> bool:
        """True when the script shows nothing a parameter could hold (no default, no call)."""
        function = param[0]
        return not self.param_values("", param) and not (
            not isinstance(function, ast.Lambda) and self.function_calls(function)
        )

    # ------------------------------------------------------------------ where values come from
    def sources(self, node) -> list:
        """Every node that ``node``'s value may come from: itself and, recursively, the values
        assigned to the names it uses (the assignments on earlier lines; in a loop, where there
        are none, the later ones), the script's own functions it calls, and the values its
        parameters may hold."""
        if id(node) in self._sources_cache:
            return self._sources_cache[id(node)]
        seen, out, stack = set(), [], [node]
        while stack:
            current = stack.pop()
            for sub in ast.walk(current):
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                out.append(sub)
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                    stack.extend(self._values_of(sub, seen))
        self._sources_cache[id(node)] = out
        return out

    def _values_of(self, name: ast.Name, seen: set) -> list:
        found, param = self.bindings(name.id, name)
        statement = self.statement_of(name)
        line = self.line_of(statement) if statement is not None else name.lineno
        earlier = [b for b in found if b[0] < line]
        if not earlier:
            earlier = [b for b in found if b[2] is not statement]
        values = [value for _, value, _ in earlier]
        if param and not earlier:
            values += self.param_values(name.id, param)
        holder = self.parent.get(name)
        called = isinstance(holder, ast.Call) and holder.func is name
        if called or not (found or param):
            for function in self.functions.get(name.id, []) + self.classes.get(name.id, []):
                if id(function) not in seen:
                    seen.add(id(function))
                    values += function.body
        return values

    def reaches(self, node, predicate) -> bool:
        return any(predicate(sub) for sub in self.sources(node))

    # ------------------------------------------------------------------ rank, size
    def is_rank_call(self, node, local: bool = False) -> bool:
        """Whether ``node`` itself is a read of the rank (``local``: of the local rank)."""
        key = env_key(node)
        if key is not None:
            return key in (LOCAL_RANK_ENV if local else RANK_ENV)
        target = node.func if isinstance(node, ast.Call) else node
        if not isinstance(target, (ast.Name, ast.Attribute)):
            return False
        member = self.horovod_member(target)
        if member:
            return member[1] in (HVD_LOCAL_RANK if local else HVD_RANK)
        member = self.dist_member(target)
        if member:
            return not local and member in DIST_RANK or member == "get_node_local_rank"
        full = self.qualname(target)
        if full in (OTHER_LOCAL_RANK if local else OTHER_RANK):
            return True
        name = last_name(target)
        if name in ("get_world_rank", "get_local_rank") and isinstance(node, ast.Call):
            return not local or name == "get_local_rank"
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            names = LOCAL_RANK_NAMES if local else RANK_NAMES
            if name.lower() in names:
                return self._opaque(node)
        return False

    def is_size_call(self, node) -> bool:
        key = env_key(node)
        if key is not None:
            return key in SIZE_ENV
        target = node.func if isinstance(node, ast.Call) else node
        if not isinstance(target, (ast.Name, ast.Attribute)):
            return False
        member = self.horovod_member(target)
        if member:
            return member[1] in HVD_SIZE
        member = self.dist_member(target)
        if member:
            return member in DIST_SIZE
        if self.qualname(target) in OTHER_SIZE:
            return True
        if last_name(target) == "get_world_size" and isinstance(node, ast.Call):
            return True
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
            if last_name(node).lower() in SIZE_NAMES:
                return self._opaque(node)
        return False

    def _opaque(self, node) -> bool:
        """A name or attribute whose value the script does not show (a parameter no call fills, an
        argparse option, an attribute): taken for what its name says."""
        if isinstance(node, ast.Attribute):
            return True
        found, param = self.bindings(node.id, node)
        return not found and (param is None or self.unknown_param(param))

    def depends_on_rank(self, node, local: bool = False, depth: int = 0) -> bool:
        """Whether ``node`` names the rank (``local``: the local rank): a call or variable that
        reads it, or a name given such a value by a plain assignment (``rank = hvd.rank()``,
        ``is_root = rank == 0``), a parameter the script's calls fill with one, or the script's
        function that returns one. Not a value computed far from it (a batch of data a rank chose):
        what runs under ``if first_batch:`` is not a test on the rank."""
        key = (id(node), local)
        if depth == 0 and key in self._rank_cache:
            return self._rank_cache[key]
        found = False
        for sub in ast.walk(node):
            if self.is_rank_call(sub, local):
                found = True
                break
            if depth >= 4 or not isinstance(sub, ast.Name) or not isinstance(sub.ctx, ast.Load):
                continue
            bindings, param = self.bindings(sub.id, sub)
            values = [
                value
                for _, value, statement in bindings
                if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                or isinstance(value, ast.NamedExpr)
            ]
            if param and not bindings:
                values += self.param_values(sub.id, param)
            holder = self.parent.get(sub)
            if not bindings and isinstance(holder, ast.Call) and holder.func is sub:
                values += [
                    r.value
                    for function in self.functions.get(sub.id, [])
                    for r in ast.walk(function)
                    if isinstance(r, ast.Return) and r.value is not None
                ]
            if any(self.depends_on_rank(v, local, depth + 1) for v in values):
                found = True
                break
        if depth == 0:
            self._rank_cache[key] = found
        return found

    def depends_on_size(self, node) -> bool:
        return self.reaches(node, self.is_size_call)

    # ------------------------------------------------------------------ guards
    def rank_guard(self, node):
        """The ``if`` (or conditional expression, ``and``) on the rank that ``node`` runs under, or
        the call of the script's function that does; None when it runs on every rank."""
        guard = self._direct_guard(node)
        if guard is not None:
            return guard
        # the script's own function, called only under a guard; a class made only under one
        for holder in self.enclosing(node, FUNCTIONS + (ast.ClassDef,)):
            if isinstance(holder, ast.ClassDef):
                uses = [
                    c
                    for c in self.calls
                    if isinstance(c.func, ast.Name) and c.func.id == holder.name
                ]
            else:
                uses = self.function_calls(holder)
                if not uses and self.enclosing(holder, (ast.ClassDef,)):
                    continue  # a method: the class's creation decides
            if uses and all(self._direct_guard(use) is not None for use in uses):
                return uses[0]
        return None

    def _direct_guard(self, node):
        child, current = node, self.parent.get(node)
        while current is not None and not isinstance(current, SCOPES + (ast.ClassDef,)):
            if isinstance(current, (ast.If, ast.While)) and child is not current.test:
                if self.depends_on_rank(current.test):
                    return current
            elif isinstance(current, ast.IfExp) and child is not current.test:
                if self.depends_on_rank(current.test):
                    return current
            elif isinstance(current, ast.BoolOp) and isinstance(current.op, ast.And):
                position = current.values.index(child) if child in current.values else 0
                if any(self.depends_on_rank(v) for v in current.values[:position]):
                    return current
            elif isinstance(current, ast.comprehension) or isinstance(
                current, (ast.ListComp, ast.GeneratorExp)
            ):
                generators = getattr(current, "generators", [current])
                for generator in generators:
                    if any(self.depends_on_rank(test) for test in getattr(generator, "ifs", [])):
                        return current
            # an early exit on the rank before this statement: if rank != 0: return
            if isinstance(child, ast.stmt):
                for body in ("body", "orelse", "finalbody"):
                    statements = getattr(current, body, None)
                    if isinstance(statements, list) and child in statements:
                        for earlier in statements[: statements.index(child)]:
                            if self._rank_exit(earlier):
                                return earlier
            child, current = current, self.parent.get(current)
        if isinstance(current, SCOPES) and isinstance(child, ast.stmt):
            statements = getattr(current, "body", [])
            if isinstance(statements, list) and child in statements:
                for earlier in statements[: statements.index(child)]:
                    if self._rank_exit(earlier):
                        return earlier
        return None

    def _rank_exit(self, statement) -> bool:
        """``if rank != 0: return`` (or continue, break, raise, sys.exit)."""
        if not isinstance(statement, ast.If) or not self.depends_on_rank(statement.test):
            return False
        last = statement.body[-1] if statement.body else None
        if isinstance(last, (ast.Return, ast.Continue, ast.Break, ast.Raise)):
            return True
        return (
            isinstance(last, ast.Expr)
            and isinstance(last.value, ast.Call)
            and last_name(last.value.func) in ("exit", "_exit")
        )

    # ------------------------------------------------------------------ helpers for the rules
    def keyword(self, call: ast.Call, name: str, position: int | None = None):
        """The argument ``name`` of ``call`` (by keyword, or at ``position``), or None."""
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
        if position is not None and position < len(call.args):
            arg = call.args[position]
            return None if isinstance(arg, ast.Starred) else arg
        return None

    def method_calls(self, method: str) -> list:
        """Calls ``x.method(...)``."""
        return [
            c for c in self.calls if isinstance(c.func, ast.Attribute) and c.func.attr == method
        ]

    def receiver(self, call: ast.Call):
        """``x`` in ``x.method(...)``."""
        return call.func.value if isinstance(call.func, ast.Attribute) else None

    def line_of(self, node) -> int:
        return getattr(node, "lineno", 1)

    def words(self, node) -> str:
        """The source text of ``node`` on one line (for messages)."""
        text = None
        end = getattr(node, "end_lineno", None)
        if getattr(node, "lineno", None) and end and end <= len(self._encoded):
            first, last = node.lineno - 1, end - 1
            lines = self._encoded[first : last + 1]
            if first == last:
                lines = [lines[0][node.col_offset : node.end_col_offset]]
            else:
                lines = [
                    lines[0][node.col_offset :],
                    *lines[1:-1],
                    lines[-1][: node.end_col_offset],
                ]
            text = b"\n".join(lines).decode("utf-8", errors="replace")
        return " ".join((text or ast.unparse(node)).split())


def _imported_modules(node) -> list:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.module and not node.level:
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return []


# aliases of module members are followed for these packages only (name = tf.keras.optimizers)
_KNOWN_ROOTS = {
    "horovod",
    "tensorflow",
    "tf_keras",
    "keras",
    "torch",
    "hvdcourse",
    "numpy",
    "os",
    "mpi4py",
}
