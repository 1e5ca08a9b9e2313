"""``python -m hvdcourse.course.check``: the same as the installed ``hvdcourse-check`` command."""

import sys

from hvdcourse.course.check.envcheck import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
