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
    """The HTML book, built by the same command as ``make book``.

    A build newer than every source (``make book`` just before ``make test``) is reused; otherwise
    (a fresh clone, a changed lesson or package module) every lesson is executed again.
    """
    from hvdcourse.book_build import BUILD_LOG, build_is_current

    if not build_is_current():
        proc = subprocess.run([sys.executable, "-m", "hvdcourse.book_build"], cwd=ROOT, capture_output=True,
                              text=True, timeout=2400)
        assert proc.returncode == 0, "book build failed:\n" + (proc.stdout + proc.stderr)[-6000:]
    return {"html": BUILD, "log": open(BUILD_LOG).read()}


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
