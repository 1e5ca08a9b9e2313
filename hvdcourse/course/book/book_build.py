"""Build the book (``make book``) or execute single lessons (lesson authors, tests).

``python -m hvdcourse.course.book.book_build``                - build ``_build/html``, executing the pages that need it
                                                               (``--jobs N``: N lessons at a time, :mod:`hvdcourse.course.book.prerun`)
``python -m hvdcourse.course.book.book_build --record-times`` - execute every page afresh and record the times in book/data
``python -m hvdcourse.course.book.book_build --execute F.md``  - execute one lesson with nbclient, fail on error

The build is strict: ``-W -n --keep-going`` turns a failing cell, a broken reference or any
warning into a failed build (Jupyter Book 1.x otherwise exits 0 on a failed cell).

What is executed (the book never shows stale output):

* Pages execute through myst-nb's cache (``execute_notebooks: cache`` in ``_config.yml``;
  jupyter-cache in ``_build/.jupyter_cache``). jupyter-cache keys a page by its own code cells: a page
  whose code is unchanged takes its outputs from the cache, a changed one is executed again.
* A page's output also depends on what its code runs or reads: the package, the scripts, the data
  (book/data, and the MNIST copy in use: the full one in Keras' cache when present, else the offline
  one), the environment's recipe (requirements.txt, tools/, patches/).
  Before each build this module hashes those files (:data:`INPUTS`) and keeps the digest beside the
  cache (``_build/.jupyter_cache.inputs``); when it differs from the stored one (or there is none) the
  cache is emptied and every page is read and executed again (``jupyter-book build --all``).
* The intro and the instructor guide print the course map, which ``hvdcourse.course.book.course_map`` reads from
  the other pages' text and from book/data/execution_times.json: they run with
  ``execution_mode: force`` (their headers) and ``hvdcourse.course.book.sphinx_ext`` re-reads them on every build
  (a few seconds), so neither the pages' text nor the recorded times are in the digest.
* A failed build removes Sphinx's saved environment, so the next build reads every page again (pages
  that executed without error then come from the cache): a page that failed is never taken as built.
* ``_config.yml``, ``_toc.yml`` and the pages' prose are Sphinx's own business (it re-reads what
  changed); they do not change what the code cells print.

Execution times come from myst-nb: ``hvdcourse.course.book.sphinx_ext`` writes every page's execution data
(``runtime``, ``mtime``, ``method``) to ``_build/execution_times.json`` at the end of a build; this
module prints them. ``--record-times`` empties the cache first, so every page executes in that build,
and copies the times with the machine and date into book/data/execution_times.json, the reference
figures of the instructor's day plans (``hvdcourse.course.book.course_map``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from hvdcourse.examples.data import KERAS_CACHE, NPM_CACHE
from hvdcourse.runtime.mpienv import launch_env
from hvdcourse.runtime.errors import RunFailed, RunTimeout, UsageError, run_cli
from hvdcourse.runtime.paths import BOOK_DATA, ROOT

BUILD_TIMEOUT = 1800


def book_env(root: str = ROOT) -> dict:
    """Environment for executing lessons: MPI defaults, quiet TF, a private IPython dir."""
    # TF_CPP_MIN_LOG_LEVEL=3: TensorFlow 2.20 logs "failed call to cuInit" at ERROR level on every machine
    # without an NVIDIA driver; on a page that line is noise (and stderr in a cell fails the strict build).
    # the book's folder, then the course's
    pythonpath = os.pathsep.join(dict.fromkeys([root, ROOT]))
    env = launch_env(
        {
            "PYTHONPATH": pythonpath,
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            "TF_CPP_MIN_LOG_LEVEL": "3",
        }
    )
    env.setdefault("IPYTHONDIR", tempfile.mkdtemp(prefix="hvdcourse-ipython-"))
    return env


def execute_lesson(path: str, timeout: int = 900) -> float:
    """Execute the MyST notebook ``path`` in a fresh kernel; raise on the first failing cell."""
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(path)
    os.environ.update(book_env())
    start = time.monotonic()
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    try:
        NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}},
        ).execute()
    except CellTimeoutError as err:
        print(err, file=sys.stderr)
        raise RunTimeout(
            f"{path}: a cell ran longer than {timeout} s (above); raise --timeout or fix the cell"
        ) from None
    except CellExecutionError as err:
        print(err, file=sys.stderr)  # the cell and its traceback: what the author needs to fix it
        raise RunFailed(f"{path}: a cell failed (its source and error are above)") from None
    missing = unglued_references(nb)
    if missing:
        raise RunFailed(
            f"{path}: the prose shows {', '.join(missing)}, which no cell glued: "
            "glue them (myst_nb.glue) or fix the names"
        )
    return time.monotonic() - start


# {glue}`key`, {glue:text}`key:.1f`, ```{glue:figure} key``` ... (myst-nb's glue roles and directives)
_GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")
_GLUE_DIRECTIVE = re.compile(r"^\s*(?:```|:::)\{glue(?::\w+)?\}\s+(\S+)", re.MULTILINE)


def glued_keys(nb) -> list:
    """Names glued by the executed notebook ``nb``'s outputs (``myst_nb.glue`` marks them "scrapbook")."""
    return [
        output.get("metadata", {})["scrapbook"]["name"]
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if "scrapbook" in output.get("metadata", {})
    ]


def unglued_references(nb) -> list:
    """Glue names the markdown refers to that no cell of the executed notebook ``nb`` glued, sorted.

    References to another page's values (``other::key``) are left to the book build to check.
    """
    text = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    roles = [content.split(":")[0] for content in _GLUE_ROLE.findall(text) if "::" not in content]
    referenced = set(roles) | {key for key in _GLUE_DIRECTIVE.findall(text) if "::" not in key}
    return sorted(referenced - set(glued_keys(nb)))


# What the pages' code runs or reads, besides the pages themselves (see the module docstring): folders
# and files of the course, and the MNIST copies that hvdcourse.examples.data loads (the full one when present).
INPUTS = (
    "hvdcourse",
    "slurm",
    "tools",
    "patches",
    "exercises",
    "solutions",
    "requirements.txt",
    os.path.join("book", "data"),
    KERAS_CACHE,
    NPM_CACHE,
)
TIMES_RECORD = os.path.join(BOOK_DATA, "execution_times.json")
# Read only by the pages that execute on every build (course_map); recording it must not empty the cache.
NOT_INPUTS = (os.path.relpath(TIMES_RECORD, ROOT),)


def inputs_digest(root: str = ROOT, inputs=INPUTS) -> str:
    """SHA-256 over the names and contents of every file under ``inputs`` (relative to ``root``, or
    absolute), and over the names of those that are missing (a data file that appears counts)."""
    digest = hashlib.sha256()
    for name in inputs:
        top = os.path.join(root, name)
        if not os.path.exists(top):
            digest.update(name.encode() + b" absent\0")
            continue
        walk = (
            os.walk(top)
            if os.path.isdir(top)
            else [(os.path.dirname(top), [], [os.path.basename(top)])]
        )
        for dirpath, dirnames, files in walk:
            dirnames[:] = sorted(
                d for d in dirnames if d not in ("__pycache__", ".ipynb_checkpoints")
            )
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                if f.endswith(".pyc") or rel in NOT_INPUTS or not os.path.isfile(path):
                    continue
                digest.update(rel.encode() + b"\0")
                with open(path, "rb") as fh:
                    digest.update(fh.read() + b"\0")
    return digest.hexdigest()


def prepare_cache(root: str = ROOT, inputs=INPUTS, fresh: bool = False) -> bool:
    """Empty myst-nb's execution cache if the pages' inputs changed (or ``fresh``); True if emptied."""
    cache = os.path.join(root, "_build", ".jupyter_cache")
    stamp = cache + ".inputs"
    digest = inputs_digest(root, inputs)
    if not fresh and os.path.isfile(stamp) and open(stamp).read().strip() == digest:
        return False
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(os.path.dirname(stamp), exist_ok=True)
    with open(stamp, "w") as fh:
        fh.write(digest + "\n")
    return True


def run_jupyter_book(root: str, timeout: int, every_page: bool, env: dict) -> int:
    """``jupyter-book build`` of ``root`` (strict), its output shown as it goes; its exit code
    (RunTimeout after ``timeout`` s)."""
    jb = os.path.join(os.path.dirname(sys.executable), "jupyter-book")
    cmd = [jb, "build", root, "--builder", "html", "-W", "-n", "--keep-going"] + (
        ["--all"] if every_page else []
    )
    proc = subprocess.Popen(cmd, cwd=root, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        from hvdcourse.runtime.launch import kill_group

        kill_group(proc)
        raise RunTimeout(f"the book build took longer than {timeout} s and was stopped")


def forget_environment(root: str) -> None:
    """Delete Sphinx's saved environment after a failed or stopped build: with --keep-going Sphinx saves
    it even when a page failed, and the next build would not read that page again and would exit 0."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(root, "_build", ".doctrees", "environment.pickle"))


def toc_lessons(root: str = ROOT) -> list:
    """The lessons of ``_toc.yml`` (``notebooks/...``), in the book's order."""
    import yaml

    with open(os.path.join(root, "_toc.yml")) as fh:
        toc = yaml.safe_load(fh)
    pages = [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    return [page for page in pages if page.startswith("notebooks/")]


def build_book(
    timeout: int = BUILD_TIMEOUT,
    record: bool = False,
    root: str = ROOT,
    inputs=INPUTS,
    jobs: int = 1,
) -> int:
    """Build the book in ``root``; execute what changed (module docstring), ``jobs`` lessons at a
    time (:mod:`hvdcourse.course.book.prerun`); 0 on success."""
    start = time.time()
    emptied = prepare_cache(root, inputs, fresh=record)
    if emptied:
        print(
            "book: the pages' inputs changed (or no cache yet, or --record-times): every page executes"
        )
    env = book_env(root)
    if jobs > 1 and not record:  # recorded times are a lesson's own, one at a time
        from hvdcourse.course.book import prerun

        lessons = [os.path.join(root, page + ".md") for page in toc_lessons(root)]
        recorded = json.load(open(TIMES_RECORD))["lessons"] if os.path.isfile(TIMES_RECORD) else {}
        prerun.execute_into_cache(root, lessons, jobs, timeout, env, order=recorded)
    try:
        code = run_jupyter_book(root, timeout, emptied, env)
    except BaseException:  # timeout or Ctrl-C: maybe after Sphinx saved its environment
        forget_environment(root)
        raise
    index = os.path.join(root, "_build", "html", "index.html")
    if code != 0:
        forget_environment(root)
        raise RunFailed(f"jupyter-book failed (exit {code}); the first error above names the cell")
    if not os.path.isfile(index):
        raise RunFailed(f"the book build finished but {index} is missing")
    seconds = time.time() - start
    times = execution_times(root)
    report_times(times, start, seconds)
    if record:
        record_times(times, seconds)
        print(
            f"book: recorded the execution times in {os.path.relpath(TIMES_RECORD, root)}; "
            "building again so the course map shows them"
        )
        code = run_jupyter_book(root, timeout, False, env)
        if code != 0:
            raise RunFailed(
                f"jupyter-book failed (exit {code}) in the build after recording the times"
            )
    print(f"book: built {index} in {time.time() - start:.0f} s")
    return 0


def execution_times(root: str = ROOT) -> dict:
    """{page: myst-nb's execution data} of the last build (written by ``hvdcourse.course.book.sphinx_ext``)."""
    with open(os.path.join(root, "_build", "execution_times.json")) as fh:
        return json.load(fh)["pages"]


def report_times(times: dict, start: float, total: float) -> None:
    """Print each page's execution time, saying which pages executed in this build (mtime >= start)."""
    executed = {name: data for name, data in times.items() if data["mtime"] >= start}
    for name, data in sorted(times.items()):
        how = (
            "executed" if name in executed else f"from the cache (executed {_date(data['mtime'])})"
        )
        print(f"book:   {data['runtime'] or 0:7.1f} s  {name}: {how}")
    print(
        f"book: {len(executed)} of {len(times)} pages executed, "
        f"{sum(d['runtime'] or 0 for d in executed.values()):.0f} s of a {total:.0f} s build"
    )


def _date(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def record_times(times: dict, total: float, target: str = TIMES_RECORD) -> None:
    """Write the pages' execution seconds with the machine and date to ``target`` (the day plans' figures)."""
    from hvdcourse.runtime.machine import cpu_model, load_average, memory_gib

    load = load_average()
    lessons = {name: round(data["runtime"], 1) for name, data in sorted(times.items())}
    summary = {
        "machine": f"{cpu_model()}, {os.cpu_count()} cores, {memory_gib():.0f} GiB "
        f"(load average {load[1]:.1f} over the last 5 min of the build)",
        "date": time.strftime("%Y-%m-%d"),
        "source": "myst-nb execution data of a build that executed every page",
        "build_seconds": round(total),
        "execution_seconds": round(sum(lessons.values())),
        "lessons": lessons,
    }
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "w") as fh:
        json.dump(summary, fh, indent=2)
        fh.write("\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", nargs="+", metavar="LESSON", help="only execute these lessons")
    parser.add_argument("--timeout", type=int, default=BUILD_TIMEOUT)
    parser.add_argument(
        "--jobs",
        type=int,
        default=int(os.environ.get("BOOK_JOBS", "1")),
        help="lessons executed at once before the build reads them (default 1, or $BOOK_JOBS; "
        "1: one after another, while the build reads them; --record-times always uses 1)",
    )
    parser.add_argument(
        "--record-times",
        action="store_true",
        help="execute every page afresh and write their execution times to "
        f"{os.path.relpath(TIMES_RECORD, ROOT)}",
    )
    args = parser.parse_args(argv)
    if args.execute:
        missing = [path for path in args.execute if not os.path.isfile(path)]
        if missing:
            raise UsageError(
                f"no lesson file {', '.join(missing)}; give paths such as notebooks/05_conversion.md"
            )
        for path in args.execute:
            seconds = execute_lesson(path, timeout=args.timeout)
            print(f"executed {path} in {seconds:.1f} s")
        return 0
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {args.jobs}")
    return build_book(args.timeout, args.record_times, jobs=args.jobs)


if __name__ == "__main__":
    sys.exit(run_cli(main))
