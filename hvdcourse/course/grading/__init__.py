"""Grading a class's exercise notebooks (``hvdcourse-grade``); see :mod:`hvdcourse.course.grading.grader`.

Its modules:

* :mod:`~hvdcourse.course.grading.answers`: The answer run: the learner's definitions, observed by
  the checks, written out as data (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.audit`: The grader's sandbox inside every Python process of a
  submission (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.bwrap`: The sandbox of a submission's processes when the grader is
  not root: bubblewrap (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.common`: What the grader's two ways of running a class share
  (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.confine`: Start a submission's process under the grader's limits,
  as the sandbox's own user (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.extract`: The answers of a notebook, read from its text by the
  grader itself (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.hidden`: The grader's own inputs: cases the judge checks beyond
  those the learner sees (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.judge`: The judge: points from the answer data, in a process no
  learner code ever ran in (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.keys`: The grader's answer keys: instructor-only.
* :mod:`~hvdcourse.course.grading.kernel_side`: What the grader sets up inside the student's kernel:
  only an output cap (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.processes`: Find and kill every process a submission started
  (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.report`: Scores, feedback and class summary from the graded
  notebooks (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.runner`: Execute one student notebook in its sandbox and report
  what happened (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.slurm`: ``hvdcourse-grade --slurm``: grade a class as a Slurm job
  array (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.slurm_task`: One task of ``hvdcourse-grade --slurm``, on a compute
  node (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.throughput`: How fast the grader grades, from recorded runs
  (lesson: Instructor guide).
"""
