"""Exercises of the course: one MyST source each, generated learner and solution notebooks, checks.

* :mod:`~hvdcourse.exercises.markers` - the ``### BEGIN/END SOLUTION`` transform;
* :mod:`~hvdcourse.exercises.generate` - ``make exercises`` (sources -> ``exercises/``, ``solutions/``);
* :mod:`~hvdcourse.exercises.checks` - what learners call, e.g. ``checks.ex04_ring(ring_allreduce)``;
* :mod:`~hvdcourse.exercises.harness` / :mod:`~hvdcourse.exercises.drivers` - running a learner's
  function on 2 ranks and observing it.

The grader for instructors is :mod:`hvdcourse.grading.grader` (``hvdcourse-grade``).
"""
