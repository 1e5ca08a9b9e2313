"""The top layer: the course's own tools, which lessons call but learners need not read.

Sorted by kind:

* :mod:`~hvdcourse.course.lessons`: lesson code (ring allreduce, timeline, gradients, faults, the
  conversion lab, data and model parallelism), one idea per module;
* :mod:`~hvdcourse.course.check`: the ``hvdcourse-check`` command and its GPU part;
* :mod:`~hvdcourse.course.services`: JupyterLab, Prometheus and the local Slurm cluster;
* :mod:`~hvdcourse.course.exercises`: the graded exercises, generated with their solutions, and
  their checks;
* :mod:`~hvdcourse.course.grading`: the isolated grader (``hvdcourse-grade``);
* :mod:`~hvdcourse.course.classroom`: release, collect, grade and return for a class
  (``hvdcourse-class``);
* :mod:`~hvdcourse.course.hub`: JupyterHub for a class, an account per learner;
* :mod:`~hvdcourse.course.bench`: the benchmark suite and its records;
* :mod:`~hvdcourse.course.book`: the book's build and its Sphinx extension;
* :mod:`~hvdcourse.course.moved`: old module paths that keep working.

Modules here may import :mod:`hvdcourse.examples` and :mod:`hvdcourse.runtime`; nothing below imports
them. The layers inside, and no import circle, are contracts in ``pyproject.toml``.
"""

from hvdcourse.course import moved as _moved

_moved.install()
