"""Sphinx extension for the course's book (``_config.yml`` loads it).

Jupyter Book 1.x registers sphinx-thebe's and sphinx-togglebutton's inline configuration scripts
twice (once with filename ``None``, once with ``''``), which makes every page throw "Identifier
'THEBE_JS_URL' has already been declared" in the browser; this drops such duplicates.

Execution times, from myst-nb's own execution data of each page (``runtime``, ``mtime``, ``method``:
what myst-nb keeps per document in the Sphinx environment and shows with ``{nb-exec-table}``):

* the role ``{execution-time}`lesson``` (for example ``{execution-time}`05_conversion```) shows the
  seconds that page's code took when it was executed for this build, or for the cached outputs this
  build shows, with the date and the machine; it is filled in after every page was read, so a page
  can show its own time; a page without execution data is a warning (an error in the strict build);
* at the end of a successful build every page's execution data is written to
  ``_build/execution_times.json`` (``hvdcourse.course.book.book_build`` prints and records it).

Lesson numbers: a lesson's title carries the number of its file (``notebooks/05_conversion`` is
"5. Converting ..."), in the page, the sidebar and every link to it, so that "lesson 5" means the same
in the book, the instructor guide and the folder; the files are numbered in ``_toc.yml``'s order,
in which every lesson comes after its prerequisites (tests/book/test_lesson_order.py).

And one re-reading rule (see ``hvdcourse.course.book.book_build``): the pages that myst-nb executed with
``execution_mode: force`` (their header says so: the intro and the instructor guide print the course
map from the other pages' text) are read again on every build.
"""

import datetime
import json
import os

from docutils import nodes
from sphinx.transforms import SphinxTransform
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
ROLE_KEY = "hvdcourse_execution_time"  # marks, in myst-nb's per-page data, pages that use the role


def _script_key(script) -> tuple:
    attributes = getattr(script, "attributes", {}) or {}
    return (
        getattr(script, "filename", None) or "",
        tuple(sorted((k, str(v)) for k, v in attributes.items())),
    )


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


# -------------------------------------------------------------------------------- lesson numbers
def lesson_number(docname: str):
    """5 for ``notebooks/05_conversion``; None for a page that is not a lesson."""
    from hvdcourse.course.book.course_map import lesson_number as number

    return number(docname) if docname.startswith("notebooks/") else None


class LessonNumberTransform(SphinxTransform):
    """Prefixes a lesson's first title with its file's number ("5. "), before Sphinx collects the
    titles for the sidebar, the page's <title> and the links to the page."""

    default_priority = 700  # Sphinx's titles and labels are collected at 880 (doctree-read)

    def apply(self, **kwargs):
        number = lesson_number(self.env.docname)
        section = next(iter(self.document.findall(nodes.section)), None)
        if number is None or section is None:
            return
        title = section.next_node(nodes.title)
        if title is not None and not title.astext().startswith(f"{number}. "):
            title.insert(0, nodes.Text(f"{number}. "))


# ------------------------------------------------------------------------------- execution times
def _pages(env) -> dict:
    """myst-nb's per-document data ({docname: {"exec_data": {...}, ...}})."""
    from myst_nb.sphinx_ import NbMetadataCollector

    return NbMetadataCollector.get_doc_data(env)


def this_machine() -> str:
    from hvdcourse.runtime.machine import cpu_model

    return f"{cpu_model()}, {os.cpu_count()} cores"


def execution_time_text(exec_data: dict, machine: str) -> str:
    """'95 s (executed 2026-11-23 on AMD EPYC, 2 cores)' from myst-nb's execution data of a page."""
    seconds = exec_data.get("runtime")
    if seconds is None:
        raise ValueError("myst-nb recorded no run time (the page was not executed)")
    shown = f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.1f}"
    date = datetime.datetime.fromtimestamp(exec_data["mtime"]).strftime("%Y-%m-%d")
    return f"{shown} s (executed {date} on {machine})"


def find_exec_data(pages: dict, lesson: str) -> dict:
    """The execution data of the page named ``lesson`` (docname or its last part); KeyError if none."""
    found = [doc for doc in pages if doc == lesson or doc.rsplit("/", 1)[-1] == lesson]
    if len(found) != 1 or not pages[found[0]].get("exec_data"):
        raise KeyError(
            f"no page {lesson!r} with myst-nb execution data in this build"
            + (f" (several match: {found})" if len(found) > 1 else "")
        )
    return pages[found[0]]["exec_data"]


class execution_time(nodes.Inline, nodes.TextElement):
    """Placeholder of ``{execution-time}``; replaced once every page was read and executed."""


def _execution_time_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    from myst_nb.sphinx_ import NbMetadataCollector

    env = inliner.document.settings.env
    NbMetadataCollector.set_doc_data(env, env.docname, ROLE_KEY, True)
    return [execution_time(rawtext, text.strip(), lesson=text.strip())], []


class ExecutionTimeTransform(SphinxPostTransform):
    default_priority = 8  # with myst-nb's {nb-exec-table}, before references are resolved

    def run(self, **kwargs):
        machine = None
        for node in list(self.document.findall(execution_time)):
            try:
                data = find_exec_data(_pages(self.env), node["lesson"])
                machine = machine or this_machine()
                node.replace_self(nodes.Text(execution_time_text(data, machine)))
            except (KeyError, ValueError) as err:
                LOGGER.warning(f"execution-time: {err.args[0]}", location=node)
                node.replace_self(nodes.literal(node.rawsource, node.rawsource))


def _reread_forced_pages(app, env, added, changed, removed):
    """Pages myst-nb executed with ``execution_mode: force`` are read (and executed) on every build."""
    return [
        doc
        for doc, data in _pages(env).items()
        if (data.get("exec_data") or {}).get("method") == "force" and doc not in removed
    ]


def _rewrite_pages_with_times(app, env):
    """When any page was executed, the pages showing execution times are written again."""
    from myst_nb.sphinx_ import NbMetadataCollector

    if NbMetadataCollector.new_exec_data(env):
        return [doc for doc, data in _pages(env).items() if data.get(ROLE_KEY)]
    return []


def _write_execution_times(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    pages = {
        doc: data["exec_data"]
        for doc, data in sorted(_pages(app.env).items())
        if doc in app.env.all_docs and data.get("exec_data")
    }
    path = os.path.join(os.path.dirname(os.path.abspath(app.outdir)), "execution_times.json")
    with open(path, "w") as fh:
        json.dump(
            {
                "machine": this_machine(),
                "pages": {
                    doc.rsplit("/", 1)[-1]: {
                        "docname": doc,
                        **{k: data.get(k) for k in ("runtime", "mtime", "method", "succeeded")},
                    }
                    for doc, data in pages.items()
                },
            },
            fh,
            indent=2,
        )


def setup(app):
    app.setup_extension("myst_nb")
    app.connect("html-page-context", _drop_duplicate_scripts)
    app.add_node(execution_time)
    app.add_role("execution-time", _execution_time_role)
    app.add_post_transform(ExecutionTimeTransform)
    app.add_transform(LessonNumberTransform)
    app.connect("env-get-outdated", _reread_forced_pages)
    app.connect("env-updated", _rewrite_pages_with_times)
    app.connect("build-finished", _write_execution_times)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
