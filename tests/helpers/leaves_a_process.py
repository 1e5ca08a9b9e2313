"""Test helper: a test that passes but leaves an orphaned process behind
(tests/lessons/test_faults.py runs it in a nested pytest session, whose end-of-session check must
then fail)."""

import subprocess
import sys


def test_passes_but_leaves_a_process_behind():
    # the grandchild outlives its parent
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(120)\n"
    subprocess.run([sys.executable, "-c", code], check=True)
