"""``hvdcourse-check``: is this machine fit for the course, and its GPU part (``--gpu``); and
``hvdcourse-lint``, the check of a learner's own training script.

Run as ``hvdcourse-check`` (the installed command) or ``python -m hvdcourse.course.check``.

* :mod:`~hvdcourse.course.check.envcheck`: is this environment fit for the course?
  (lesson: Installing Horovod).
* :mod:`~hvdcourse.course.check.gpu`: The GPU check, ``hvdcourse-check --gpu``, and its record
  (lesson: Installing Horovod).
* :mod:`~hvdcourse.course.check.lint`: ``hvdcourse-lint``, a learner's own training script checked
  for the distributed mistakes the course teaches, statically and on 2 ranks (``--run``)
  (lesson: Converting a Keras MNIST script to Horovod).
"""
