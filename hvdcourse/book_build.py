"""Build the book (``make book``) or execute single lessons (lesson authors, tests).

``python -m hvdcourse.book_build``               - execute every lesson and build ``_build/html``
``python -m hvdcourse.book_build --execute F.md`` - execute one lesson with nbclient, fail on error

The build is strict: ``-W -n --keep-going`` turns a failing cell, a broken reference or any
warning into a failed build (Jupyter Book 1.x otherwise exits 0 on a failed cell).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from hvdcourse.mpienv import launch_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_TIMEOUT = 1800


def book_env() -> dict:
    """Environment for executing lessons: MPI defaults, quiet TF, a private IPython dir."""
    env = launch_env({"PYTHONPATH": ROOT, "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    env.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="hvdcourse-ipython-"))
    return env


def execute_lesson(path: str, timeout: int = 900) -> float:
    """Execute the MyST notebook ``path`` in a fresh kernel; raise on the first failing cell."""
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(path)
    os.environ.update(book_env())
    start = time.monotonic()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}}).execute()
    return time.monotonic() - start


def build_book(timeout: int = BUILD_TIMEOUT, record: bool = False) -> int:
    jb = os.path.join(os.path.dirname(sys.executable), "jupyter-book")
    cmd = [jb, "build", ROOT, "--builder", "html", "-W", "-n", "--keep-going"]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=book_env(), start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        from hvdcourse.launch import kill_group
        kill_group(proc)
        print(f"book: ERROR: the build took longer than {timeout} s and was stopped", file=sys.stderr)
        return 124
    seconds = time.monotonic() - start
    index = os.path.join(ROOT, "_build", "html", "index.html")
    if code != 0:
        print(f"book: ERROR: jupyter-book failed (exit {code}); the first error above names the cell",
              file=sys.stderr)
        return code
    if not os.path.isfile(index):
        print(f"book: ERROR: build finished but {index} is missing", file=sys.stderr)
        return 1
    _report_times(seconds, record)
    print(f"book: built {index} in {seconds:.0f} s")
    return 0


TIMES_RECORD = os.path.join(ROOT, "book", "data", "execution_times.json")


def _report_times(total: float, record: bool = False) -> None:
    """Print each lesson's execution time as recorded by myst-nb; keep them in ``_build``.

    ``record=True`` also updates the committed copy the intro and the instructor guide show.
    """
    times = {}
    for dirpath, _, files in os.walk(os.path.join(ROOT, "_build", "jupyter_execute")):
        for name in files:
            if name.endswith(".ipynb"):
                with open(os.path.join(dirpath, name)) as fh:
                    meta = json.load(fh).get("metadata", {}).get("mystnb", {}).get("execution", {})
                if "runtime" in meta:
                    times[os.path.relpath(os.path.join(dirpath, name), ROOT)] = meta["runtime"]
    for name, runtime in sorted(times.items()):
        print(f"book:   {runtime:7.1f} s  {name}")
    print(f"book: executing lessons took {sum(times.values()):.0f} s of a {total:.0f} s build")
    import platform
    summary = {"machine": f"{platform.node()}: {os.cpu_count()} cores, {platform.platform()}",
               "date": time.strftime("%Y-%m-%d"), "build_seconds": round(total),
               "lessons": {os.path.splitext(os.path.basename(k))[0]: round(v, 1) for k, v in sorted(times.items())}}
    targets = [os.path.join(ROOT, "_build", "execution_times.json")] + ([TIMES_RECORD] if record else [])
    for target in targets:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as fh:
            json.dump(summary, fh, indent=2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", nargs="+", metavar="LESSON", help="only execute these lessons")
    parser.add_argument("--timeout", type=int, default=BUILD_TIMEOUT)
    parser.add_argument("--record-times", action="store_true",
                        help=f"also write the lessons' execution times to {os.path.relpath(TIMES_RECORD, ROOT)}")
    args = parser.parse_args(argv)
    if args.execute:
        for path in args.execute:
            seconds = execute_lesson(path, timeout=args.timeout)
            print(f"executed {path} in {seconds:.1f} s")
        return 0
    return build_book(args.timeout, args.record_times)


if __name__ == "__main__":
    sys.exit(main())
