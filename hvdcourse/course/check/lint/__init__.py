"""``hvdcourse-lint``: a learner's own training script, checked for the distributed mistakes the
course teaches (lessons: Converting a Keras MNIST script to Horovod; PyTorch with Horovod, and DDP).

* :mod:`~hvdcourse.course.check.lint.lint`: the command (``hvdcourse-lint SCRIPT...``,
  ``python -m hvdcourse.course.check.lint``), :func:`~hvdcourse.course.check.lint.lint.lint_source`;
* :mod:`~hvdcourse.course.check.lint.rules`: each rule's name, fix and lesson;
* :mod:`~hvdcourse.course.check.lint.source` and :mod:`~hvdcourse.course.check.lint.facts`: the
  script read with Python's ``ast``, its imports and aliases resolved;
* :mod:`~hvdcourse.course.check.lint.undefined`, :mod:`~hvdcourse.course.check.lint.checks_setup`,
  :mod:`~hvdcourse.course.check.lint.checks_data`, :mod:`~hvdcourse.course.check.lint.checks_ranks`,
  :mod:`~hvdcourse.course.check.lint.signatures`: the rules;
* :mod:`~hvdcourse.course.check.lint.run` and :mod:`~hvdcourse.course.check.lint.probe`:
  ``--run``, the script on 2 ranks for a few steps;
* :mod:`~hvdcourse.course.check.lint.magic`: ``%hvdlint`` in a notebook, after
  ``%load_ext hvdcourse.course.check.lint``.
"""


def load_ipython_extension(ipython) -> None:
    """``%load_ext hvdcourse.course.check.lint``: registers the ``%hvdlint`` magic."""
    from hvdcourse.course.check.lint.magic import register

    register(ipython)
