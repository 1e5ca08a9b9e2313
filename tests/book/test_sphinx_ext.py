"""The execution-time role shows myst-nb's execution data of a page, and refuses a page without it.

(The role inside a real build: tests/book/test_book_cache.py.)
"""

import datetime

import pytest

from hvdcourse.course.book.sphinx_ext import execution_time_text, find_exec_data

MTIME = datetime.datetime(2026, 11, 23, 14, 5).timestamp()


def test_seconds_date_and_machine_of_an_executed_page():
    data = {"runtime": 95.1, "mtime": MTIME, "method": "cache", "succeeded": True}
    assert (
        execution_time_text(data, "test box, 2 cores")
        == "95 s (executed 2026-11-23 on test box, 2 cores)"
    )
    assert execution_time_text({**data, "runtime": 1.54}, "box").startswith("1.5 s (")


def test_a_page_without_a_run_time_is_refused():
    with pytest.raises(ValueError, match="no run time"):
        execution_time_text({"runtime": None, "mtime": MTIME}, "box")


def test_pages_are_found_by_docname_or_last_part_and_unknown_ones_refused():
    pages = {"notebooks/05_conversion": {"exec_data": {"runtime": 3.0}}, "book/intro": {"glue": []}}
    assert find_exec_data(pages, "05_conversion") == {"runtime": 3.0}
    assert find_exec_data(pages, "notebooks/05_conversion") == {"runtime": 3.0}
    with pytest.raises(KeyError, match="no page 'intro' with myst-nb execution data"):
        find_exec_data(pages, "intro")
    with pytest.raises(KeyError, match="no page '06_timeline'"):
        find_exec_data(pages, "06_timeline")


def test_every_lesson_of_the_book_uses_the_role_with_its_own_name():
    import os
    import re

    from hvdcourse.course.book.course_map import ROOT, lessons

    for row in lessons():
        text = open(os.path.join(ROOT, "notebooks", row["lesson"] + ".md")).read()
        assert re.findall(r"\{execution-time\}`([^`]+)`", text) == [row["lesson"]], row["lesson"]


def test_a_lessons_number_is_its_files_and_other_pages_have_none():
    from hvdcourse.course.book.sphinx_ext import lesson_number

    assert lesson_number("notebooks/05_conversion") == 5
    assert lesson_number("notebooks/13_model_parallelism") == 13
    assert lesson_number("book/intro") is None and lesson_number("book/setup") is None


def _titled_document(docname: str, title: str):
    from types import SimpleNamespace

    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document

    document = new_document("page", get_default_settings(Parser))
    document.settings.env = SimpleNamespace(docname=docname)
    section = nodes.section()
    section += nodes.title(text=title)
    section += nodes.section("", nodes.title(text="Overview"))
    document += section
    return document


def test_the_book_shows_a_lessons_number_before_its_title_once():
    from docutils import nodes

    from hvdcourse.course.book.sphinx_ext import LessonNumberTransform

    document = _titled_document("notebooks/13_model_parallelism", "Model parallelism by hand")
    for _ in range(2):  # a page read again keeps one number
        LessonNumberTransform(document).apply()
    titles = [title.astext() for title in document.findall(nodes.title)]
    assert titles == ["13. Model parallelism by hand", "Overview"]


def test_pages_that_are_not_lessons_keep_their_titles():
    from docutils import nodes

    from hvdcourse.course.book.sphinx_ext import LessonNumberTransform

    document = _titled_document("book/setup", "Set up the course")
    LessonNumberTransform(document).apply()
    assert next(iter(document.findall(nodes.title))).astext() == "Set up the course"
