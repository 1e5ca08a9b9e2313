"""The one channel for results from ranks to the process that launched them (lesson: Horovod's design, explored live).

A rank calls :func:`report` with a JSON-ready dict; :func:`hvdcourse.runtime.launch.run_ranks`
hands back what each rank reported in ``RankRun.results``, in rank order, like ``horovod.run``
returns each rank's value. The launcher names a fresh folder in ``$HVDCOURSE_RESULTS_DIR``; rank
``R`` (as its launcher announced it, :func:`hvdcourse.runtime.ranks.launcher_rank`) writes
``rank-R.json`` there, atomically, so the launcher never reads half a file and a rank's output lines
never need parsing. A script run by hand, without a launcher of the course, reports nothing.

A rank may report several times (the throughput benchmark reports each batch size as it finishes):
its file holds the list of its records, and ``RankRun.results[R]`` is that list, or ``None`` when
rank ``R`` reported nothing (it failed, or only another rank reports).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from hvdcourse.runtime.ranks import launcher_rank

VARIABLE = "HVDCOURSE_RESULTS_DIR"


def report(record: dict, environ=None) -> str | None:
    """Add ``record`` to this rank's results; return the file written (``None`` outside a launch).

    ``record`` must be JSON-serialisable (a ``TypeError`` says which value is not, before anything
    is written).
    """
    environ = os.environ if environ is None else environ
    folder = environ.get(VARIABLE)
    if not folder:
        return None
    path = os.path.join(folder, f"rank-{launcher_rank(environ)}.json")
    records = _load(path) or []
    records.append(record)
    text = json.dumps(records)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)  # the launcher sees the old list or the new one, never half of one
    return path


def _load(path: str) -> list | None:
    """The records in ``path``; ``None`` if missing or not a list written by :func:`report`."""
    try:
        with open(path) as fh:
            records = json.load(fh)
    except (OSError, ValueError):
        return None
    return records if isinstance(records, list) else None


def new_folder() -> str:
    """A fresh private folder for one launch's results."""
    return tempfile.mkdtemp(prefix="hvdcourse-results-")


def collect(folder: str, np: int) -> list:
    """Each rank's list of records, in rank order (``None`` for a rank with no readable file).

    The files are read as data only (JSON, never unpickled), so what a rank wrote cannot run code
    in the caller; a file that is not a JSON list counts as nothing reported.
    """
    return [_load(os.path.join(folder, f"rank-{rank}.json")) for rank in range(np)]


def remove_folder(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
