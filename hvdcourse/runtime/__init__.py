"""The bottom layer: running processes on ranks, knowing nothing of the course.

Launching ranks with a timeout and clean-up (:mod:`~hvdcourse.runtime.launch`), the environment
every launched process gets (:mod:`~hvdcourse.runtime.mpienv`), MPI engines for ``%%px`` cells
(:mod:`~hvdcourse.runtime.engines`), host discovery for elastic runs, CPU binding on cluster
nodes, this process's rank, where the clone's files are (:mod:`~hvdcourse.runtime.paths`), and
the machine a figure was measured on (:mod:`~hvdcourse.runtime.machine`).
Modules here import only the standard library, third-party packages and each other: never
:mod:`hvdcourse.examples` or :mod:`hvdcourse.course` (the contracts in ``pyproject.toml``, checked by
``tests/project/test_layers.py``, enforce it).
"""
