"""Exercises of the course: one MyST source each, generated learner and solution notebooks, checks.

* :mod:`~hvdcourse.course.exercises.markers` - the ``### BEGIN/END SOLUTION`` transform;
* :mod:`~hvdcourse.course.exercises.generate` - ``make exercises`` (sources -> ``exercises/``, ``solutions/``);
* :mod:`~hvdcourse.course.exercises.checks` - what learners call, e.g. ``checks.ex04_ring(ring_allreduce)``;
* :mod:`~hvdcourse.course.exercises.harness` / :mod:`~hvdcourse.course.exercises.drivers` - running a learner's
  function on 2 ranks and observing it.

The grader for instructors is :mod:`hvdcourse.course.grading.grader` (``hvdcourse-grade``).
"""
