"""``python -m hvdcourse.course.classroom``: the ``hvdcourse-class`` command (lesson: Instructor guide)."""

import sys

from hvdcourse.course.classroom.cli import main

sys.exit(main())
