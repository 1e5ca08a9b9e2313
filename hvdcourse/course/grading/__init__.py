"""Grading a class's exercise notebooks (``hvdcourse-grade``); see :mod:`hvdcourse.course.grading.grader`."""
