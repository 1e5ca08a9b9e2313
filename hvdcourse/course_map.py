"""The course's lessons, their planned times and measured execution times (intro, instructor guide)."""
from __future__ import annotations

import json
import os
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMES = os.path.join(ROOT, "book", "data", "execution_times.json")
_TIME_LINE = re.compile(r"\*\*Time\*\*:\s*teaching\s+(\d+)\s*min(?:,\s*exercises\s+(\d+)\s*min)?")


def lessons() -> list:
    """(file, title, teaching minutes, exercise minutes) for every lesson in ``_toc.yml``."""
    toc = yaml.safe_load(open(os.path.join(ROOT, "_toc.yml")))
    rows = []
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            name = chapter["file"]
            if not name.startswith("notebooks/"):
                continue
            text = open(os.path.join(ROOT, name + ".md")).read()
            title = re.search(r"^# (.+)$", text, re.M).group(1).strip()
            timing = _TIME_LINE.search(text)
            teach, practise = (int(timing.group(1)), int(timing.group(2) or 0)) if timing else (None, None)
            rows.append({"lesson": os.path.basename(name), "title": title, "part": part["caption"],
                         "teaching_min": teach, "exercises_min": practise})
    return rows


def timing_table():
    """A DataFrame of the lessons with planned minutes and the last recorded execution seconds."""
    import pandas as pd

    table = pd.DataFrame(lessons())
    recorded = json.load(open(TIMES)) if os.path.isfile(TIMES) else {"lessons": {}}
    table["executes_in_s"] = [recorded["lessons"].get(name) for name in table["lesson"]]
    table.attrs["recorded"] = {k: v for k, v in recorded.items() if k != "lessons"}
    return table


def recorded_execution(lesson: str) -> dict:
    """How long ``lesson`` (e.g. "03_allreduce") took to execute in the last recorded book build.

    {"seconds", "machine", "date"}, read from ``book/data/execution_times.json`` (written by
    ``python -m hvdcourse.book_build --record-times``). A lesson's Overview glues these values
    instead of typing them.
    """
    recorded = json.load(open(TIMES)) if os.path.isfile(TIMES) else {"lessons": {}}
    if lesson not in recorded["lessons"]:
        raise KeyError(f"no recorded execution time for {lesson!r} in {os.path.relpath(TIMES, ROOT)}: "
                       "build the book with `python -m hvdcourse.book_build --record-times`")
    return {"seconds": recorded["lessons"][lesson], "machine": recorded["machine"], "date": recorded["date"]}
