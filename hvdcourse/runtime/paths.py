"""Where the course's files are: the one place that knows the layout of a clone (all lessons).

``ROOT`` is the folder that holds the ``hvdcourse`` package: the repository root in a clone (and
the folder to put on ``PYTHONPATH`` for processes that must import this checkout's package).
Modules ask here instead of counting ``os.path.dirname`` levels from their own file, so moving a
module between the package's layers does not move what it reads.
"""

from __future__ import annotations

import json
import os

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../hvdcourse
ROOT = os.path.dirname(PACKAGE)
# measured data the lessons read (bench, times, grading)
BOOK_DATA = os.path.join(ROOT, "book", "data")
BUILD = os.path.join(ROOT, "_build")  # the book's build folder (ignored by git)


def cache_dir() -> str:
    """The course's cache outside the clone (the same rule as tools/setup_env.sh):
    ``$HVDCOURSE_CACHE``, else ``$XDG_CACHE_HOME/hvdcourse``, else ``~/.cache/hvdcourse``."""
    if os.environ.get("HVDCOURSE_CACHE"):
        return os.environ["HVDCOURSE_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hvdcourse")


def wheel_cache_entry(horovod_version: str) -> str:
    """The folder of the cached Horovod wheel that is installed (tools/setup_env.sh installs it from
    there, and pip records the file), else the pattern of the cache's entries for this version."""
    from importlib import metadata

    try:
        direct = json.loads(metadata.distribution("horovod").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        direct = {}
    url = direct.get("url", "")
    if url.startswith("file://"):
        return os.path.dirname(url[len("file://") :])
    return os.path.join(cache_dir(), "wheels", f"hvd{horovod_version}-*")
