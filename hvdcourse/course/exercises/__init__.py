"""Exercises of the course: one MyST source each, generated learner and solution notebooks, checks.

* :mod:`~hvdcourse.course.exercises.markers` - the ``### BEGIN/END SOLUTION`` transform;
* :mod:`~hvdcourse.course.exercises.generate` - ``make exercises`` (sources -> ``exercises/``, ``solutions/``);
* :mod:`~hvdcourse.course.exercises.checks` - what learners call, e.g. ``checks.ex04_ring_allreduce(ring_allreduce)``;
* :mod:`~hvdcourse.course.exercises.harness` / :mod:`~hvdcourse.course.exercises.drivers` - running a learner's
  function on 2 ranks and observing it; each group's rank side beside its checks:
  :mod:`~hvdcourse.course.exercises.drivers_basic`, :mod:`~hvdcourse.course.exercises.drivers_training`,
  :mod:`~hvdcourse.course.exercises.drivers_scale`, :mod:`~hvdcourse.course.exercises.drivers_torch`.

The grader for instructors is :mod:`hvdcourse.course.grading.grader` (``hvdcourse-grade``).

Also:

* :mod:`~hvdcourse.course.exercises.checks_basic`: Checks of exercises 1-4: collectives, an exact
  global mean, sharding, a ring allreduce.
* :mod:`~hvdcourse.course.exercises.checks_scale`: Checks of exercises 12-14: a column-parallel
  linear layer, the pipeline bubble predicted and measured, and exact gradient accumulation with
  Horovod.
* :mod:`~hvdcourse.course.exercises.checks_tools`: Checks of exercises 8-11: timeline analysis,
  choosing a setup from a scaling curve, a Slurm job script, and finding the bugs of a Horovod
  script.
* :mod:`~hvdcourse.course.exercises.checks_torch`: Check of exercise 15: a single-process PyTorch
  script converted to Horovod (lesson: PyTorch with Horovod, and DDP).
* :mod:`~hvdcourse.course.exercises.checks_training`: Checks of exercises 5-7: the 6-step
  conversion, LR scaling and warm-up, rank-0 checkpoints and averaged metrics (lessons: Converting a
  Keras MNIST script to Horovod; Horovod's design, explored live).
* :mod:`~hvdcourse.course.exercises.common`: Helpers shared by the exercise checks.
* :mod:`~hvdcourse.course.exercises.measure_scaling`: Measure the scaling curve of exercise 9 on
  this machine (lesson: Measuring performance).
* :mod:`~hvdcourse.course.exercises.paths`: Where the exercise sources, learner and solution
  notebooks live.
* :mod:`~hvdcourse.course.exercises.replay`: Checks in two halves: observe the learner's answers in
  one process, judge in another (lesson: Instructor guide).
* :mod:`~hvdcourse.course.exercises.result`: What a check found, as learners read it and as the
  grader stores it.
* :mod:`~hvdcourse.course.exercises.timing`: How long each graded exercise takes a learner: read,
  write, run (the stated "Time: N minutes").
"""
