"""Execute the book's lessons several at a time, into myst-nb's cache, before the build reads them.

Jupyter Book 1.x executes the pages one after another while Sphinx reads them, and much of a lesson's
time is waiting (process starts, rendezvous, Ray and Slurm starting). :func:`execute_into_cache`
runs the lessons the cache lacks in ``jobs`` processes at once, each exactly as myst-nb would (the
page read by myst-nb's own reader, ``jupyter_cache``'s ``single_nb_execution`` in the page's folder,
the same timeout, errors not allowed), and adds the executed notebooks to the cache the way myst-nb
does. The build then finds every lesson in the cache: what it shows and the execution times it
reports are those of these runs. A lesson that fails here is left out of the cache, and the build
executes it again and fails on it, with its traceback, as it would have without this step.

``python -m hvdcourse.course.book.prerun PAGE OUT`` executes one page and writes the executed
notebook to ``OUT`` (one process per page; only the parent writes to the cache's database).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

CACHE = os.path.join("_build", ".jupyter_cache")


def book_config(path: str) -> dict:
    """The ``_config.yml`` of the book that holds the page ``path`` (``notebooks/NN.md``)."""
    import yaml

    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    with open(os.path.join(root, "_config.yml")) as fh:
        return yaml.safe_load(fh)


def read_page(path: str):
    """The page as myst-nb reads it for the build (its code cells hash to the build's cache key)."""
    from myst_nb.core.read import read_myst_markdown_notebook
    from myst_parser.config.main import MdParserConfig

    extensions = book_config(path).get("parse", {}).get("myst_enable_extensions", [])
    config = MdParserConfig(enable_extensions=set(extensions))
    with open(path, encoding="utf-8") as fh:
        return read_myst_markdown_notebook(fh.read(), config=config, add_source_map=True, path=path)


def forced(nb) -> bool:
    """Pages that execute on every build (``execution_mode: force`` in their header)."""
    return nb.metadata.get("mystnb", {}).get("execution_mode") == "force"


def missing_pages(root: str, pages: list) -> list:
    """The pages among ``pages`` (paths) whose current code the cache holds no execution of."""
    from jupyter_cache import get_cache

    cache = get_cache(os.path.join(root, CACHE))
    todo = []
    for page in pages:
        nb = read_page(page)
        if forced(nb):
            continue
        try:
            cache.match_cache_notebook(nb)
        except KeyError:
            todo.append(page)
    return todo


def execute_page(path: str, out: str) -> dict:
    """Execute one page as myst-nb does (its cell timeout from ``_config.yml``); write it to ``out``;
    ``{"seconds", "error"}``."""
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution

    nb = read_page(path)
    result = single_nb_execution(
        nb,
        cwd=os.path.dirname(os.path.abspath(path)),
        allow_errors=False,
        timeout=book_config(path).get("execute", {}).get("timeout", 900),
        meta_override=True,
    )
    nbformat.write(nb, out)
    return {"seconds": result.time, "error": result.exc_string if result.err else None}


def execute_into_cache(
    root: str, pages: list, jobs: int, timeout: int, env: dict, order: dict | None = None
) -> dict:
    """Execute ``pages`` (paths) that the cache lacks, ``jobs`` at a time, longest first by
    ``order`` (``{page name: seconds}``), each ended (with its kernel and ranks) after ``timeout``
    seconds; cache the ones that succeeded. ``{page: seconds or None}``."""
    from hvdcourse.runtime.launch import kill_group

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    todo = missing_pages(root, pages)
    order = order or {}
    todo.sort(key=lambda p: -order.get(os.path.splitext(os.path.basename(p))[0], 0))
    if not todo:
        return {}
    print(f"book: executing {len(todo)} lessons, {jobs} at a time, into the cache", flush=True)
    scratch = tempfile.mkdtemp(prefix="hvdcourse-prerun-")

    def run(page):
        out = os.path.join(scratch, os.path.basename(page) + ".ipynb")
        report = os.path.join(scratch, os.path.basename(page) + ".json")
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "hvdcourse.course.book.prerun", page, out],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its kernel, engines and ranks: one group to end
        )
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            output = f"stopped after {timeout} s"
        finally:
            kill_group(proc, grace=1.0)  # whatever the page left behind in its group
        seconds = time.monotonic() - start
        if proc.returncode != 0 or not os.path.isfile(report):
            tail = (output or "").strip().splitlines()[-1:] or ["?"]
            print(f"book:   {page}: could not execute here ({tail[0][:200]})", flush=True)
            return page, None, None
        with open(report) as fh:
            result = json.load(fh)
        if result["error"]:
            print(f"book:   {page}: a cell failed; the build runs it again to show it", flush=True)
            return page, None, None
        print(f"book:   {page}: executed in {seconds:.0f} s", flush=True)
        return page, out, result["seconds"]

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = list(pool.map(run, todo))
    cache = get_cache(os.path.join(root, CACHE))
    times = {}
    for page, out, seconds in done:
        times[page] = seconds
        if out is None:
            continue
        nb = nbformat.read(out, as_version=4)
        cache.cache_notebook_bundle(
            CacheBundleIn(nb, os.path.abspath(page), data={"execution_seconds": seconds}),
            check_validity=False,
            overwrite=True,
        )
    shutil.rmtree(scratch, ignore_errors=True)
    return times


def main(argv=None) -> int:
    page, out = (argv if argv is not None else sys.argv[1:])[:2]
    result = execute_page(page, out)
    with open(os.path.splitext(out)[0] + ".json", "w") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
