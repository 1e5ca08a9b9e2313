"""The top layer: the course's own tools, which lessons call but learners need not read.

The book's build (:mod:`~hvdcourse.course.book`), the exercises and their checks, the grader, the
benchmarks, the local Slurm cluster, the environment check, fault injection, and the lesson props
(timeline, ring allreduce, gradients, conversion lab, hardware figures). Modules here may import
:mod:`hvdcourse.examples` and :mod:`hvdcourse.runtime`; nothing below imports them (checked by
``tests/test_layers.py``).
"""
