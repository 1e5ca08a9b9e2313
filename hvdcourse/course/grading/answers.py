"""The answer run: the learner's definitions, observed by the checks, written out as data (lesson: Instructor guide).

Started by the grader (as the sandbox's user, with its limits, after every process of the
notebook's own run is gone) as ``python -m hvdcourse.course.grading.answers JOB.json`` in a fresh folder.
It executes only what :mod:`hvdcourse.course.grading.extract` kept of the notebook (imports, definitions,
constants), then runs each exercise's check in recording mode (:class:`~hvdcourse.course.exercises.replay.Recorder`):
the check calls the learner's functions, starts their ranks, and every outcome is stored as plain
data in ``answers.json``. Nothing here is trusted: the judge (:mod:`hvdcourse.course.grading.judge`), a
process this one never touches, decides the points from that data.
"""

from __future__ import annotations

import time

STARTED = time.time()  # this module's first line: the end of the process's start

import ast  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402

# Frameworks whose import costs seconds (TensorFlow alone 4 s of CPU). The answer process rarely uses
# them itself: the checks send the learner's functions to fresh ranks, which import what they need.
DEFERRED_ROOTS = ("tensorflow", "tf_keras", "keras", "horovod", "torch")


def resolve(module: str, top: bool = False):
    """What ``import a.b as x`` binds (the module ``a.b``), or ``import a.b`` (``top``: ``a``)."""
    found = importlib.import_module(module)
    return sys.modules[module.split(".")[0]] if top else found


class Deferred:
    """A heavy import, made on first use; pickled (to the ranks) as the import itself."""

    def __init__(self, *args):
        object.__setattr__(self, "_args", args)
        object.__setattr__(self, "_value", None)

    def __reduce__(self):
        return resolve, self._args

    def __getattr__(self, name):
        if self._value is None:
            object.__setattr__(self, "_value", resolve(*self._args))
        return getattr(self._value, name)


def defer_import(stmt, namespace: dict) -> bool:
    """Bind the names of an import of a heavy framework without importing it; False if not one."""
    if not isinstance(stmt, ast.Import):
        return False  # ``from X import name`` may bind a class or function the checks call: import it now
    modules = [a.name for a in stmt.names]
    roots = {m.split(".")[0] for m in modules}
    if not roots <= set(DEFERRED_ROOTS) or not all(importlib.util.find_spec(r) for r in roots):
        return False  # a light or a missing module: imported now (a missing one is reported)
    for alias in stmt.names:  # a module: used through its attributes, which Deferred forwards
        name = alias.asname or alias.name.split(".")[0]
        namespace[name] = Deferred(alias.name, alias.asname is None)
    return True


def load_definitions(job: dict, folder: str):
    """A module holding the notebook's kept statements, each cell from its own file (for tracebacks)."""
    # not importable: cloudpickle sends its functions by value
    module = types.ModuleType("__notebook__")
    module.__dict__["__builtins__"] = __builtins__
    errors = []
    for number, source, positions in job["cells"]:
        path = os.path.join(folder, f"cell{number}.py")
        with open(path, "w") as fh:
            fh.write(source)
        tree = ast.parse(source)
        keep = {tuple(pos) for pos in positions}  # (line, column) of the kept statements
        for stmt in tree.body:
            if (stmt.lineno, stmt.col_offset) not in keep:
                continue
            from hvdcourse.course.grading.extract import _strip_annotations

            for node in ast.walk(stmt):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    _strip_annotations(node)
            if isinstance(stmt, ast.AnnAssign):
                stmt = ast.copy_location(ast.Assign(targets=[stmt.target], value=stmt.value), stmt)
            if defer_import(stmt, module.__dict__):
                continue
            try:
                exec(
                    compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec"), module.__dict__
                )
            except Exception as err:  # e.g. an import of a package the course does not install
                errors.append(
                    {
                        "cell": number,
                        "line": stmt.lineno,
                        "error": f"{type(err).__name__}: {err}"[:300],
                    }
                )
    return module, errors


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0]) as fh:
        job = json.load(fh)
    folder = os.path.dirname(os.path.abspath(argv[1]))
    from hvdcourse.course.exercises import replay
    from hvdcourse.course.exercises.checks import EXERCISES
    from hvdcourse.course.grading import hidden

    # when each stage ended, for the report's timing (the runner reads them as information only)
    stamps = [("start", STARTED), ("imports", time.time())]
    module, errors = load_definitions(job, folder)
    stamps.append(("definitions", time.time()))
    recorder = replay.Recorder()
    # the grader's inputs, from the runner: this sandbox's user cannot read the keys themselves
    inputs = hidden.decode(job.get("hidden"))
    for ex_id in job["exercises"]:
        exercise = EXERCISES[ex_id]
        answers = [module.__dict__.get(name) for name in exercise.answers]
        for name, value in zip(exercise.answers, answers):
            if name in module.__dict__ and not callable(value):
                recorder.observe("value", name, (), lambda v=value: {"value": v})
        try:
            with replay.mode(recorder):
                exercise.check(*answers, quiet=True, **hidden.options(ex_id, inputs, answers=False))
        except BaseException as err:  # noqa: B902 - the judge reports what is missing
            errors.append(
                {"cell": 0, "line": 0, "error": f"check {ex_id}: {type(err).__name__}: {err}"[:300]}
            )
    stamps.append(("checks", time.time()))
    tmp = argv[1] + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"records": recorder.records, "errors": errors, "stamps": stamps}, fh)
    os.replace(tmp, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
