"""JupyterHub for a class on one machine: ``make hub`` / ``make hub-stop`` (lesson: Instructor guide).

- :mod:`~hvdcourse.course.hub.accounts`: one Unix account per learner of the roster, with the lessons
  and exercises (never the solutions) in their home;
- :mod:`~hvdcourse.course.hub.limits`: per-learner memory, CPU and process limits (cgroups);
- :mod:`~hvdcourse.course.hub.setup`: the installation's and the state's paths, the files written;
- :mod:`~hvdcourse.course.hub.hubconfig` and :mod:`~hvdcourse.course.hub.spawner`: JupyterHub's
  configuration and spawner, run in the hub's own Python;
- :mod:`~hvdcourse.course.hub.server`: start and stop; :mod:`~hvdcourse.course.hub.api`: the REST API;
- :mod:`~hvdcourse.course.hub.cli`: the command line;
- :mod:`~hvdcourse.course.hub.scale`: 30 learners' servers started, measured and culled (the
  instructor guide's figures);
- :mod:`~hvdcourse.course.hub.class_round`: 30 learners taken through release, collect, grade and
  return on such a hub (the instructor guide's figures).

Also:

* :mod:`~hvdcourse.course.hub.private`: The answer keys, closed to learners' accounts when the class
  hub starts (lesson: Instructor guide).
"""
