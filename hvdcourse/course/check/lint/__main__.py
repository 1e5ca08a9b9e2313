"""``python -m hvdcourse.course.check.lint``: the same as the installed ``hvdcourse-lint`` command."""

import sys

from hvdcourse.course.check.lint.lint import cli

if __name__ == "__main__":
    sys.exit(cli())
