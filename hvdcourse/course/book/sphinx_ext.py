"""Sphinx extension for the course's book (``_config.yml`` loads it).

Jupyter Book 1.x registers sphinx-thebe's and sphinx-togglebutton's inline configuration scripts
twice (once with filename ``None``, once with ``''``), which makes every page throw "Identifier
'THEBE_JS_URL' has already been declared" in the browser; this drops such duplicates.

It also adds the role ``{execution-time}`lesson``` (for example ``{execution-time}`05_conversion```):
the seconds that lesson took to execute in the last recorded book build, with the machine, read from
``book/data/execution_times.json`` (``python -m hvdcourse.course.book.book_build --record-times``), so a page
never types a measured time by hand.
"""
import json
import os

from docutils import nodes

from hvdcourse.runtime.paths import BOOK_DATA

TIMES = os.path.join(BOOK_DATA, "execution_times.json")


def _script_key(script) -> tuple:
    attributes = getattr(script, "attributes", {}) or {}
    return (getattr(script, "filename", None) or "", tuple(sorted((k, str(v)) for k, v in attributes.items())))


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def recorded_execution_time(lesson: str, times_file: str = TIMES) -> str:
    """'95 s (AMD EPYC, 2 cores, ...; build of 2026-11-23)' for ``lesson``; KeyError if not recorded."""
    record = json.load(open(times_file))
    if lesson not in record["lessons"]:
        raise KeyError(f"{lesson!r} has no recorded execution time in {times_file}; run "
                       "python -m hvdcourse.course.book.book_build --record-times")
    seconds = record["lessons"][lesson]
    shown = f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.1f}"
    return f"{shown} s ({record['machine']}; build of {record['date']})"


def _execution_time_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    try:
        return [nodes.Text(recorded_execution_time(text.strip()))], []
    except (OSError, KeyError, ValueError) as err:
        message = inliner.reporter.error(f"execution-time: {err}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]


def setup(app):
    app.connect("html-page-context", _drop_duplicate_scripts)
    app.add_role("execution-time", _execution_time_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
