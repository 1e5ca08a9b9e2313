"""``hvdcourse-check``: is this machine fit for the course, and its GPU part (``--gpu``).

Run as ``hvdcourse-check`` (the installed command) or ``python -m hvdcourse.course.check``.

* :mod:`~hvdcourse.course.check.envcheck`: is this environment fit for the course?
  (lesson: Installing Horovod).
* :mod:`~hvdcourse.course.check.gpu`: The GPU check, ``hvdcourse-check --gpu``, and its record
  (lesson: Installing Horovod).
"""
