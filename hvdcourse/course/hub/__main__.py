"""``python -m hvdcourse.course.hub``: see :mod:`hvdcourse.course.hub.cli`."""

import sys

from hvdcourse.course.hub.cli import main
from hvdcourse.runtime.errors import run_cli

sys.exit(run_cli(main))
