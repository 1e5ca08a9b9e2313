"""Build the book once per test session (the same command as ``make book``) and serve it on localhost."""
from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BUILD = os.path.join(ROOT, "_build", "html")


@pytest.fixture(scope="session")
def built_book():
    """Execute every lesson and build the HTML book; fail with the build's tail if it fails."""
    proc = subprocess.run([sys.executable, "-m", "hvdcourse.book_build"], cwd=ROOT, capture_output=True,
                          text=True, timeout=2400)
    log = proc.stdout + proc.stderr
    with open(os.path.join(ROOT, "_build", "book-build.log"), "w") as fh:
        fh.write(log)
    assert proc.returncode == 0, "book build failed:\n" + log[-6000:]
    return {"html": BUILD, "log": log}


@pytest.fixture(scope="session")
def book_url(built_book):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=built_book["html"])
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
