"""Killing what a submission started (hvdcourse/course/grading/processes.py), found by its token."""

import os
import subprocess
import sys
import time

from hvdcourse.course.grading.processes import kill_tagged, tagged


def test_processes_with_the_token_are_found_and_killed_even_when_orphaned():
    env = dict(os.environ, HVDCOURSE_SUBMISSION_TOKEN="tok-test-123")
    # a shell that starts a sleeper in the background and exits: the sleeper is re-parented
    subprocess.run(
        ["bash", "-c", f"{sys.executable} -c 'import time; time.sleep(120)' &"], env=env, timeout=30
    )
    deadline = time.time() + 10
    while not tagged("tok-test-123") and time.time() < deadline:
        time.sleep(0.1)
    assert tagged("tok-test-123")
    assert kill_tagged("tok-test-123") >= 1
    time.sleep(0.5)
    assert tagged("tok-test-123") == []


def test_an_empty_token_matches_nothing():
    assert tagged("") == []
