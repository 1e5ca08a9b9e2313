"""Test helper: run a course module inside ``rank<N>/`` so files written by each rank can be told apart.

Usage under a launcher: ``python tests/helpers/in_rank_dir.py hvdcourse.examples.train_hvd --args ...``
"""

import os
import runpy
import sys

from hvdcourse.runtime.ranks import launcher_rank


if __name__ == "__main__":
    folder = f"rank{launcher_rank()}"
    os.makedirs(folder, exist_ok=True)
    os.chdir(folder)
    module, sys.argv = sys.argv[1], [sys.argv[1]] + sys.argv[2:]
    runpy.run_module(module, run_name="__main__")
