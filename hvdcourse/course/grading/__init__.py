"""Grading a class's exercise notebooks (``hvdcourse-grade``); see :mod:`hvdcourse.course.grading.grader`.

Cut by stage and by process: the command reads its :mod:`~hvdcourse.course.grading.options` and
grades locally (:mod:`~hvdcourse.course.grading.local`) or as a :mod:`~hvdcourse.course.grading.slurm`
array; each notebook goes to a :mod:`~hvdcourse.course.grading.runner` (a :class:`~hvdcourse.course.grading.job.Job`
in, a report out), then to the :mod:`~hvdcourse.course.grading.judge`; the
:mod:`~hvdcourse.course.grading.report` writes scores and feedback. Its modules:

* :mod:`~hvdcourse.course.grading.grader`: The ``hvdcourse-grade`` command: options, the class's
  notebooks, grade, write the results (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.options`: The grading options, read once from the command line
  (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.job`: What travels between the grader's processes: the job, the
  report and its status, the stage times (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.local`: Grade notebooks on this machine, stage by stage (lesson:
  Instructor guide).
* :mod:`~hvdcourse.course.grading.slurm`: ``hvdcourse-grade --slurm``: grade a class as a Slurm job
  array, and one task of it on a compute node (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.runner`: Execute one student notebook in its sandbox and report
  what happened (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.answers`: The answer run: the learner's definitions, observed by
  the checks, written out as data (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.extract`: The answers of a notebook, read from its text by the
  grader itself (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.judge`: The judge: points from the answer data, in a process no
  learner code ever ran in (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.hidden`: The grader's own inputs: cases the judge checks beyond
  those the learner sees (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.keys`: The grader's answer keys: instructor-only.
* :mod:`~hvdcourse.course.grading.report`: Scores, feedback and class summary from the graded
  notebooks (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.audit`: The grader's sandbox inside every Python process of a
  submission (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.bwrap`: The sandbox of a submission's processes when the grader is
  not root: bubblewrap (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.confine`: Start a submission's process under the grader's limits,
  as the sandbox's own user (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.kernel_side`: What the grader sets up inside the student's kernel:
  only an output cap (lesson: Instructor guide).
* :mod:`~hvdcourse.course.grading.processes`: Find and kill every process a submission started
  (lesson: Instructor guide).

How fast it grades is measured by :mod:`hvdcourse.course.bench.grading_throughput`.
"""
