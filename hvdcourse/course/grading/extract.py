"""The answers of a notebook, read from its text by the grader itself (lesson: Instructor guide).

The answer run (:mod:`hvdcourse.course.grading.answers`) must hold the learner's answers and nothing else
the notebook does: a cell that patches the course's checks, wraps ``sys.stdout`` or forges files
never runs there. So the grader reads the code cells (IPython syntax turned into Python) and keeps
only top-level statements that define things without running learner code:

* ``import`` and ``from ... import`` (installed modules only: the answer run's path holds no
  learner files);
* ``def`` and ``lambda`` (no decorators except names from imported modules; defaults and annotations
  reduced to plain expressions);
* ``class`` whose body holds only such definitions and constants (no metaclass, no hooks that run
  when a subclass is made);
* ``name = expression`` where the expression only combines constants, names and attributes.

Everything else (calls, loops, ``with``, ``if`` ...) is left out and listed, so the feedback can say
so. The facts the judge trusts (which answers are defined, whether a function still holds the
placeholder, the value of a constant answer such as ``bugs``) come from here, never from a process
that ran the learner's code.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field

from hvdcourse.course.exercises.common import PLACEHOLDER

SAFE_EXPR = (
    ast.Constant,
    ast.Name,
    ast.Attribute,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.Load,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
    ast.Starred,
)
HOOKS = {"__init_subclass__", "__set_name__", "__class_getitem__", "__mro_entries__", "__prepare__"}


@dataclass
class Extracted:
    """What the grader keeps of a notebook: per cell, the kept statements; facts about each name."""

    # [(cell number, transformed source, ast.Module of kept)]
    cells: list = field(default_factory=list)
    left_out: list = field(default_factory=list)  # [(cell number, line, what)]
    unparsable: list = field(default_factory=list)  # [(cell number, message)]
    bound: dict = field(default_factory=dict)  # name -> facts of its last kept binding
    dropped_names: dict = field(default_factory=dict)  # name -> cell number of a left-out binding

    def facts(self, name: str) -> dict:
        if name in self.bound:
            return dict(self.bound[name])
        if name in self.dropped_names:
            return {"kind": "left-out", "cell": self.dropped_names[name]}
        return {"kind": "missing"}


def _safe_expr(node) -> bool:
    if isinstance(node, ast.Lambda):
        return _safe_args(node.args)
    return isinstance(node, SAFE_EXPR) and all(
        _safe_expr(child) for child in ast.iter_child_nodes(node)
    )


def _safe_args(args: ast.arguments) -> bool:
    return all(
        _safe_expr(d) for d in args.defaults + [d for d in args.kw_defaults if d is not None]
    )


def _strip_annotations(fn) -> None:
    fn.returns = None
    for arg in (
        fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs + [fn.args.vararg, fn.args.kwarg]
    ):
        if arg is not None:
            arg.annotation = None


def _root(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _safe_def(fn, imported: set) -> bool:
    if isinstance(fn, ast.ClassDef):
        return False
    ok_decorators = all(
        isinstance(d, (ast.Name, ast.Attribute)) and _root(d) in imported for d in fn.decorator_list
    )
    if ok_decorators and _safe_args(fn.args):
        _strip_annotations(fn)
        return True
    return False


def _safe_class(cls, imported: set, classes: set) -> bool:
    if cls.decorator_list or cls.keywords:
        return False
    if not all(
        isinstance(b, (ast.Name, ast.Attribute)) and (_root(b) in imported or _root(b) in classes)
        for b in cls.bases
    ):
        return False
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt.name in HOOKS or not _safe_def(stmt, imported):
                return False
        elif isinstance(stmt, ast.Assign):
            if not (all(isinstance(t, ast.Name) for t in stmt.targets) and _safe_expr(stmt.value)):
                return False
        elif not (
            isinstance(stmt, ast.Pass)
            or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
        ):
            return False
    return True


def _targets(stmt) -> list:
    names = []
    for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
        elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
        if not all(isinstance(e, ast.Name) for e in elts):
            return []
        names += [e.id for e in elts]
    return names


# a notebook's own check and show cells
QUIET_NAMES = {"checks", "sorted", "print", "display", "len", "list"}


def _describe(stmt) -> str:
    if (
        isinstance(stmt, ast.Expr)
        and {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} <= QUIET_NAMES
    ):
        # e.g. checks.ex01_collectives(after_collectives): left out, not worth a line of feedback
        return ""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return "a call"
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return (
            f"the definition of {stmt.name} (decorator, default value or class body that runs code)"
        )
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return "an assignment that runs code"
    return f"a top-level {type(stmt).__name__.lower()} statement"


@functools.cache
def _transformer_manager():
    """IPython's ``TransformerManager`` class, without importing the ``IPython`` package.

    Its two modules (``IPython.core.inputtransformer2`` and ``IPython.utils.tokenutil``) need only
    the standard library, but importing them through ``IPython/__init__.py`` loads the terminal
    shell and prompt_toolkit (1.5 s of CPU for every notebook graded). They are loaded here under
    empty stand-ins of their packages, which are taken away again afterwards."""
    import importlib
    import importlib.util
    import sys
    import types

    if "IPython" in sys.modules:  # already paid for
        return importlib.import_module("IPython.core.inputtransformer2").TransformerManager
    spec = importlib.util.find_spec("IPython")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("IPython is not installed")
    stand_ins = {}
    for name in ("IPython", "IPython.core", "IPython.utils"):
        package = types.ModuleType(name)
        folder = list(spec.submodule_search_locations)[0]
        package.__path__ = [folder if name == "IPython" else f"{folder}/{name.split('.')[1]}"]
        stand_ins[name] = package
    loaded = ("IPython.core.inputtransformer2", "IPython.utils.tokenutil")
    sys.modules.update(stand_ins)
    try:
        return importlib.import_module(loaded[0]).TransformerManager
    finally:
        for name in (*stand_ins, *loaded):
            sys.modules.pop(name, None)


def python_source(cell_source: str) -> str:
    """A cell's source with IPython syntax (magics, ``!cmd``) turned into Python."""
    return _transformer_manager()().transform_cell(cell_source)


def extract(nb) -> Extracted:
    """Keep the defining statements of every code cell of ``nb`` (an nbformat v4 notebook)."""
    out = Extracted()
    imported, classes = set(), set()
    number = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        number += 1
        try:
            source = python_source(cell.source)
            tree = ast.parse(source)
        except SyntaxError as err:
            out.unparsable.append((number, f"SyntaxError: {err.msg} (line {err.lineno})"))
            continue
        except Exception as err:  # IPython's transformer on odd input
            out.unparsable.append((number, f"{type(err).__name__}: {err}"))
            continue
        kept = []
        for stmt in tree.body:
            names, facts = [], {}
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if isinstance(stmt, ast.ImportFrom) and (
                    stmt.level or any(a.name == "*" for a in stmt.names)
                ):
                    out.left_out.append((number, stmt.lineno, "a relative or star import"))
                    continue
                names = [(a.asname or a.name).split(".")[0] for a in stmt.names]
                imported.update(names)
                facts = {"kind": "import"}
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and _safe_def(
                stmt, imported
            ):
                names = [stmt.name]
                segment = ast.get_source_segment(source, stmt) or ""
                facts = {"kind": "function", "placeholder": PLACEHOLDER in segment}
            elif isinstance(stmt, ast.ClassDef) and _safe_class(stmt, imported, classes):
                names = [stmt.name]
                classes.add(stmt.name)
                facts = {"kind": "class"}
            elif (
                isinstance(stmt, (ast.Assign, ast.AnnAssign))
                and stmt.value is not None
                and _targets(stmt)
                and _safe_expr(stmt.value)
            ):
                names = _targets(stmt)
                if isinstance(stmt, ast.AnnAssign):
                    stmt = ast.copy_location(
                        ast.Assign(targets=[stmt.target], value=stmt.value), stmt
                    )
                facts = {"kind": "value"}
                if len(names) == 1 and not isinstance(stmt.targets[0], (ast.Tuple, ast.List)):
                    if isinstance(stmt.value, ast.Lambda):
                        segment = ast.get_source_segment(source, stmt.value) or ""
                        facts = {"kind": "function", "placeholder": PLACEHOLDER in segment}
                    else:
                        try:
                            facts = {"kind": "literal", "value": ast.literal_eval(stmt.value)}
                        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                            pass
            else:
                what = _describe(stmt)
                if what:
                    out.left_out.append((number, stmt.lineno, what))
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        out.dropped_names[node.id] = number
                    elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                        out.dropped_names[node.name] = number
                continue
            kept.append(stmt)
            for name in names:
                out.bound[name] = dict(facts, cell=number)
                out.dropped_names.pop(name, None)
        if kept:
            out.cells.append((number, source, ast.Module(body=kept, type_ignores=[])))
    return out
