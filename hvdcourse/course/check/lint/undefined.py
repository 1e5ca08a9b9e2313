"""Names used before anything defines them: the ``NameError`` of Exercise 11's
``train_data = train_data.shard(...)`` (lesson: Converting a Keras MNIST script to Horovod).

Read in the order Python runs it: a module's or a class's statements one after another, a
function's body when it is called (so it sees every name its enclosing scopes define anywhere).
Where the order is not known the reading is generous: a name bound in either branch of an ``if``
counts as bound after it, a name bound anywhere in a loop counts as bound in the whole loop, a
``try`` whose handler catches ``NameError`` is not read, and a star import turns the check off.
"""

from __future__ import annotations

import ast
import builtins

MODULE_NAMES = {
    "__name__",
    "__file__",
    "__doc__",
    "__spec__",
    "__loader__",
    "__package__",
    "__builtins__",
    "__annotations__",
    "__path__",
    "__cached__",
    "__debug__",
}
BUILTINS = set(dir(builtins)) | MODULE_NAMES


def bound_names(node) -> set:
    """Every name that ``node`` (a statement, with what it contains) binds in its own scope."""
    names = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(current.name)
            stack.extend(current.decorator_list)
            continue  # its body is its own scope
        if isinstance(current, ast.Lambda):
            continue
        if isinstance(current, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            stack.extend(g.iter for g in current.generators[:1])
            continue
        if isinstance(current, ast.Name) and isinstance(current.ctx, (ast.Store, ast.Del)):
            names.add(current.id)
        elif isinstance(current, (ast.Import, ast.ImportFrom)):
            for alias in current.names:
                if alias.name != "*":
                    names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(current, ast.ExceptHandler) and current.name:
            names.add(current.name)
        elif isinstance(current, (ast.MatchAs, ast.MatchStar)) and current.name:
            names.add(current.name)
        elif isinstance(current, ast.MatchMapping) and current.rest:
            names.add(current.rest)
        elif isinstance(current, (ast.Global, ast.Nonlocal)):
            names.update(current.names)
        stack.extend(ast.iter_child_nodes(current))
    return names


def walrus_names(node) -> set:
    """Names that ``:=`` binds inside ``node``."""
    return {
        n.target.id
        for n in ast.walk(node)
        if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name)
    }


def global_names(tree) -> set:
    """Names that a function declares ``global`` (it may bind them at any time)."""
    return {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}


def catches_name_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        isinstance(t, ast.Name) and t.id in ("NameError", "Exception", "BaseException")
        for t in types
    )


class _Reader:
    def __init__(self, tree, predefined=()):
        self.found = {}  # name -> first node using it undefined
        self.globals = global_names(tree) | set(predefined)
        self.deferred = []  # (function or lambda, names visible from outside)
        self.scopes = []  # names bound anywhere in each enclosing scope, innermost last

    def scope(self, statements, visible: set, local: set | None = None, own: bool = False) -> set:
        """Read ``statements`` in order (``own``: they are a scope of their own, a module, class or
        function body); return the names bound after them."""
        bound = set(local or ())
        if own:
            self.scopes.append(bound | {n for s in statements for n in bound_names(s)})
        try:
            for statement in statements:
                bound |= self.statement(statement, visible, bound)
        finally:
            if own:
                self.scopes.pop()
        return bound

    def use(self, node, visible: set, bound: set) -> None:
        """Check the loads in an expression (not inside functions or lambdas, which run later)."""
        stack = [node]
        walrus = walrus_names(node)
        while stack:
            current = stack.pop()
            if isinstance(current, ast.Lambda):
                self.lambda_(current, visible | bound)
                continue
            if isinstance(current, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                self.comprehension(current, visible, bound)
                continue
            if isinstance(current, ast.Name) and isinstance(current.ctx, ast.Load):
                name = current.id
                if not (name in bound or name in visible or name in BUILTINS or name in walrus):
                    if name not in self.globals:
                        self.found.setdefault(name, current)
                continue
            stack.extend(ast.iter_child_nodes(current))

    def comprehension(self, node, visible, bound) -> None:
        inner = set(bound) | walrus_names(node)
        for index, generator in enumerate(node.generators):
            self.use(generator.iter, visible, inner if index else bound)
            inner |= bound_names(generator.target)
            for test in generator.ifs:
                self.use(test, visible, inner)
        for part in ("elt", "key", "value"):
            if getattr(node, part, None) is not None:
                self.use(getattr(node, part), visible, inner)

    def lambda_(self, node, visible) -> None:
        args = node.args
        for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.use(default, visible, set())
        params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        enclosing = set().union(*self.scopes) if self.scopes else set()
        self.deferred.append((node, visible | enclosing, params, [node.body]))

    def function(self, node, visible, bound) -> None:
        for decorator in node.decorator_list:
            self.use(decorator, visible, bound)
        args = node.args
        for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.use(default, visible, bound)
        params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        # at call time: everything its enclosing scopes bind anywhere
        enclosing = set().union(*self.scopes) if self.scopes else set()
        self.deferred.append((node, visible | bound | enclosing, params, node.body))

    def statement(self, node, visible: set, bound: set) -> set:
        """Check ``node``; return the names it binds."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.function(node, visible, bound)
            return {node.name}
        if isinstance(node, ast.ClassDef):
            for part in node.decorator_list + node.bases + [k.value for k in node.keywords]:
                self.use(part, visible, bound)
            self.scope(node.body, visible | bound, own=True)
            return {node.name}
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return bound_names(node)
        if isinstance(node, ast.If):
            self.use(node.test, visible, bound)
            inner = bound | walrus_names(node.test)  # if (m := ...):
            one = self.scope(node.body, visible, inner)
            other = self.scope(node.orelse, visible, inner)
            return one | other
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            if not isinstance(node, ast.While):
                self.use(node.iter, visible, bound)
            inside = bound | bound_names(node)  # a later iteration sees the earlier ones' names
            if isinstance(node, ast.While):
                self.use(node.test, visible, inside)
            self.scope(node.body, visible, inside)
            self.scope(node.orelse, visible, inside)
            return bound_names(node)
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            if any(catches_name_error(h) for h in node.handlers):
                # the script expects a NameError here: what the body tries counts as defined after
                tried = {
                    n.id
                    for s in node.body
                    for n in ast.walk(s)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                }
                return bound_names(node) | tried
            after = self.scope(node.body, visible, bound)
            for handler in node.handlers:
                if handler.type is not None:
                    self.use(handler.type, visible, bound)
                inner = after | ({handler.name} if handler.name else set())
                after |= self.scope(handler.body, visible, inner)
            after |= self.scope(node.orelse, visible, after)
            after |= self.scope(node.finalbody, visible, after)
            return after
        if isinstance(node, (ast.With, ast.AsyncWith)):
            inner = set(bound)
            for item in node.items:  # each item sees the names of the ones before it
                self.use(item.context_expr, visible, inner)
                if item.optional_vars is not None:
                    inner |= bound_names(item.optional_vars)
            return self.scope(node.body, visible, inner)
        if isinstance(node, ast.Match):
            self.use(node.subject, visible, bound)
            after = set(bound)
            for case in node.cases:
                inner = bound | bound_names(case.pattern)
                if case.guard is not None:
                    self.use(case.guard, visible, inner)
                after |= self.scope(case.body, visible, inner)
            return after
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return set(node.names)
        # a simple statement: its values first, then its targets (annotations are not read:
        # `from __future__ import annotations` leaves them unevaluated)
        if isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.use(node.value, visible, bound)
            return bound_names(node.target)
        if isinstance(node, ast.AugAssign):
            self.use(node.value, visible, bound)
            target = node.target
            if isinstance(target, ast.Name):
                load = ast.Name(id=target.id, ctx=ast.Load())
                self.use(ast.copy_location(load, target), visible, bound)
            else:
                self.use(target, visible, bound)
            return bound_names(target)
        if isinstance(node, ast.Assign):
            self.use(node.value, visible, bound)
            for target in node.targets:
                for sub in ast.walk(target):  # x[i] = ..., obj.attr = ...: loads
                    if isinstance(sub, (ast.Subscript, ast.Attribute)):
                        self.use(sub.value, visible, bound)
                        if isinstance(sub, ast.Subscript):
                            self.use(sub.slice, visible, bound)
            names = set()
            for target in node.targets:
                names |= bound_names(target)
            return names
        if isinstance(node, ast.Delete):
            return set()
        self.use(node, visible, bound)
        return bound_names(node)

    def run(self, tree) -> None:
        module = self.scope(tree.body, set(), own=True)
        everywhere = bound_names(tree)  # module level, in any order
        # functions run later: they see every name of their enclosing scopes
        while self.deferred:
            node, visible, params, body = self.deferred.pop(0)
            outer = visible | module | everywhere | self.globals
            local_names = params | {n for s in body for n in bound_names(s)}
            if isinstance(node, ast.Lambda):
                self.use(body[0], outer, params)
                continue
            # the function's own names in order; a name it binds later is a NameError here only
            # when it is never bound outside (UnboundLocalError is a NameError too)
            self.scope(body, outer - local_names, params, own=True)


# a script that calls these may define names the reading cannot see (vars() without an
# argument is globals() at module level)
DYNAMIC = {"globals", "exec"}


def dynamic_names(tree) -> str | None:
    """Why the script's names cannot all be seen (a star import, ``globals()``...), or None."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return f"line {node.lineno} imports * from {node.module}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in DYNAMIC or (node.func.id == "vars" and not node.args):
                return f"line {node.lineno} calls {node.func.id}(), which may define names"
    return None


def undefined_names(tree, predefined=()) -> list:
    """``[(name, node)]`` of the names used before (or without) any definition, in source order
    (none when :func:`dynamic_names` says the names cannot all be seen)."""
    if dynamic_names(tree):
        return []
    reader = _Reader(tree, predefined)
    reader.run(tree)
    return sorted(reader.found.items(), key=lambda item: (item[1].lineno, item[1].col_offset))
