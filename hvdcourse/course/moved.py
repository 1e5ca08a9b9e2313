"""Old module paths that moved when ``hvdcourse/course/`` was sorted by kind keep working.

``import hvdcourse.course.ring`` gives :mod:`hvdcourse.course.lessons.ring` itself (the same module
object), and ``python -m hvdcourse.course.lab`` says where the command went and runs it there, so a
learner's notes and an instructor's scripts from an earlier run of the course still work.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

PACKAGE = "hvdcourse.course"
# old name under hvdcourse.course -> new name under hvdcourse.course
MOVED = {
    **{
        name: f"lessons.{name}"
        for name in (
            "bandwidth",
            "checkpoint_order",
            "conversion_lab",
            "conversion_record",
            "dp_scale",
            "fault_compare",
            "faults",
            "framework_compare",
            "gradients",
            "hardware",
            "model_parallel",
            "ring",
            "ring_figure",
            "sources",
            "timeline",
            "torch_gradients",
        )
    },
    "envcheck": "check.envcheck",
    "gpu": "check.gpu",
    "lab": "services.lab",
    "monitoring": "services.monitoring",
    "slurm_cluster": "services.slurm_cluster",
    "bench.machine": "../runtime.machine",
    # grading cut by stage: throughput measurement went to the benchmarks, a Slurm task to slurm
    "grading.throughput": "bench.grading_throughput",
    "grading.slurm_task": "grading.slurm",
}


def new_name(fullname: str) -> str | None:
    """The module that ``fullname`` (an old path) is now, or None if it did not move."""
    if not fullname.startswith(PACKAGE + "."):
        return None
    rest = fullname[len(PACKAGE) + 1 :]
    for old, new in MOVED.items():
        if rest == old or rest.startswith(old + "."):
            target = "hvdcourse." + new[3:] if new.startswith("../") else f"{PACKAGE}.{new}"
            return target + rest[len(old) :]
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module):
        pass

    def get_code(self, fullname):
        """For ``python -m OLD``: say where it went, then run the module there as ``__main__``."""
        source = (
            "import runpy, sys\n"
            f"print('note: {fullname} moved to {self.target}; "
            f"use python -m {self.target}', file=sys.stderr)\n"
            f"runpy.run_module({self.target!r}, run_name='__main__', alter_sys=True)\n"
        )
        return compile(source, f"<moved {fullname}>", "exec")


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        new = new_name(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
