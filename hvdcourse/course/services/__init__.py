"""The services the lessons start on this machine and stop again: JupyterLab, Prometheus, Slurm, sshd.

Each starts real processes with a timeout and cleans up every process it started.

* :mod:`~hvdcourse.course.services.lab`: JupyterLab for learners: ``make lab`` (``python -m
  hvdcourse.course.services.lab``) opens the course live.
* :mod:`~hvdcourse.course.services.monitoring`: Prometheus and its node exporter on this machine,
  for one lesson's run (lesson: Watch a training run: Prometheus and a straggler).
* :mod:`~hvdcourse.course.services.slurm_cluster`: A real two-node Slurm cluster on this machine,
  for the tests and the lesson (lesson: Multi-node training with Slurm).
* :mod:`~hvdcourse.course.services.ssh_server`: An SSH server on 127.0.0.1 for a hostfile launch over
  real ``ssh`` (lesson: Multi-node training with Slurm).
"""
