"""make book: every lesson executes (within budget) and the HTML book is complete."""

import json
import math
import os

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The executed pages' recorded total (a guard against a page growing unnoticed). It was 18 minutes
# for 18 pages on 2026-11-24 (978 s); on 2026-11-26 the 21 executed pages took 1,676 s at load 1.4
# (lesson 05's going-further page alone 326 s: it runs the whole learning-rate lab), so the guard
# sat at 30 minutes. Later that day five lessons were split into a lesson and a going-further page;
# the record adds the five new pages while the lessons keep their older figures, which still include
# what moved (book/data/execution_times.json, "added_later"): 1,832 s, the moved parts counted twice.
# The guard is 31 minutes until a quiet --record-times replaces the record; bringing it back down is
# part of making the suite fit its time.
EXECUTION_BUDGET_S = 31 * 60


def toc_pages():
    toc = yaml.safe_load(open(os.path.join(ROOT, "_toc.yml")))
    pages = [toc["root"]]
    for part in toc["parts"]:
        pages += [c["file"] for c in part["chapters"]]
    return pages


def executed_pages():
    """The pages of the toc that are notebooks (a jupytext header with a kernel): the book executes
    them; the others (the glossary, the conversion sheet) are plain MyST text."""
    return [
        p
        for p in toc_pages()
        if "kernelspec:" in open(os.path.join(ROOT, p + ".md")).read().split("\n---", 1)[0]
    ]


def test_every_page_of_the_toc_was_built(built_book):
    missing = [
        p for p in toc_pages() if not os.path.isfile(os.path.join(built_book["html"], p + ".html"))
    ]
    assert not missing


def test_every_lesson_was_executed(built_book):
    lessons = [p for p in toc_pages() if p.startswith("notebooks/")]
    executed = os.path.join(ROOT, "_build", "jupyter_execute")
    not_run = [p for p in lessons if not os.path.isfile(os.path.join(executed, p + ".ipynb"))]
    assert not not_run


def test_every_page_executed_without_error_in_this_build(built_book):
    from hvdcourse.course.book.book_build import execution_times

    times = execution_times()  # myst-nb's execution data of every page, as the build shows it
    assert sorted(times) == sorted(p.rsplit("/", 1)[-1] for p in executed_pages())
    assert all(data["succeeded"] for data in times.values()), times


def test_total_execution_time_is_within_budget():
    # The budget holds for the times recorded on a quiet machine (--record-times), which the day
    # plans use too. In `make test` the build runs beside the other tests (tests/conftest.py), so
    # its own times include their load and say nothing about a lesson's cost.
    from hvdcourse.course.book import course_map

    recorded = json.load(open(course_map.TIMES))["lessons"]
    assert sum(recorded.values()) < EXECUTION_BUDGET_S, recorded


def test_every_lesson_shows_its_execution_time_from_myst_nb(built_book):
    import re

    from hvdcourse.course.book.book_build import execution_times

    times = execution_times()
    for page in toc_pages():
        if page.startswith("notebooks/"):
            text = re.sub(
                r"<[^>]+>", "", open(os.path.join(built_book["html"], page + ".html")).read()
            )
            seconds = times[page.rsplit("/", 1)[-1]]["runtime"]
            shown = f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.1f}"
            assert f"took {shown} s (executed " in " ".join(text.split()), page


def test_instructor_guide_tables_every_page_execution(built_book):
    html = open(os.path.join(built_book["html"], "book", "instructor_guide.html")).read()
    table = html[html.index("Run Time (s)") :]
    missing = [p for p in executed_pages() if p.rsplit("/", 1)[-1] not in table]
    assert not missing


def test_recorded_times_of_the_day_plans_name_machine_date_and_every_page():
    from hvdcourse.course.book import course_map

    recorded = json.load(open(course_map.TIMES))
    assert recorded["machine"] and recorded["date"]
    assert recorded["source"].startswith("myst-nb execution data")  # not scraped from a log
    assert sorted(recorded["lessons"]) == sorted(p.rsplit("/", 1)[-1] for p in executed_pages())


def test_lessons_follow_the_skeleton():
    for page in toc_pages():
        if not page.startswith("notebooks/"):
            continue
        text = open(os.path.join(ROOT, page + ".md")).read()
        for part in (
            "jupytext:",
            "**Objectives**",
            "**Prerequisites**",
            "**Time**",
            "## Key points",
            "## Exercises",
        ):
            assert part in text, f"{page}: missing {part!r}"


def test_every_lesson_states_its_planned_times():
    from hvdcourse.course.book.course_map import lessons

    unplanned = [row["lesson"] for row in lessons() if row["teaching_min"] is None]
    assert not unplanned, "Overview needs '**Time**: teaching N min, exercises M min'"


def test_one_day_plan_fits_in_the_teaching_day_without_the_droppable_lessons():
    from hvdcourse.course.book import course_map

    plan = course_map.one_day_plan()
    assert set(plan["day"]) == {1}
    assert plan["ends"].max() <= "17:30"
    titles = {row["title"] for row in course_map.lessons() if row["lesson"] in course_map.DROPPABLE}
    assert not titles & set(plan["lesson"])


def test_whole_course_with_graded_exercises_does_not_fit_in_one_day():
    from hvdcourse.course.book import course_map

    with pytest.raises(ValueError, match="do not fit in 1 day"):
        course_map.day_plan(1)


def test_two_day_plan_holds_every_lesson_once_in_course_order():
    from hvdcourse.course.book import course_map

    plan = course_map.two_day_plan()
    # pauses and the rows of graded notebooks that a pause separates from their lesson's page
    taught = [t for t in plan["lesson"] if not t.startswith("(") and "(graded exercises)" not in t]
    left_out = plan.attrs["self_study"]
    # only self-study lessons are left out, first those that DROPPABLE names first
    assert left_out == list(course_map.DROPPABLE[: len(left_out)])
    assert taught == [row["title"] for row in course_map.lessons() if row["lesson"] not in left_out]
    assert set(plan["day"]) == {1, 2}
    assert plan["ends"].max() <= "17:30"


def test_two_day_plan_leaves_out_self_study_lessons_only_when_they_do_not_fit():
    from hvdcourse.course.book import course_map

    left_out = course_map.two_day_plan().attrs["self_study"]
    if left_out:  # with one lesson fewer left out, the plan would not fit
        with pytest.raises(ValueError, match="do not fit in 2 day"):
            course_map.day_plan(2, graded=True, drop=left_out[:-1], homework=course_map.DROPPABLE)


def test_graded_notebook_linked_with_after_ref_is_planned_under_that_later_lesson():
    from hvdcourse.course.book import course_map

    placed = {
        ex: lesson for lesson, items in course_map.graded_exercises().items() for ex, _ in items
    }
    # the conversion lesson links them "after {ref}`...`" a later lesson
    assert placed["ex06_lr_warmup"] == "12_data_parallel_at_scale"
    assert placed["ex11_find_the_bug"] == "06_timeline"
    # the lesson that links it, with no "after"
    assert placed["ex05_conversion"] == "05_conversion"
    assert placed["ex01_collectives"] == "04_horovod_design"


def test_advanced_graded_notebooks_are_homework_not_class_time():
    from hvdcourse.course.book import course_map

    advanced = course_map.advanced_exercises()
    assert {"ex12_column_parallel", "ex13_pipeline_bubble", "ex14_accumulation"} <= advanced
    assert "ex05_conversion" not in advanced
    blocks = {b["lesson"]: b for b in course_map.lesson_blocks(graded=True)}
    for lesson, items in course_map.graded_exercises().items():
        assert blocks[lesson]["graded_min"] == sum(m for ex, m in items if ex not in advanced)


def test_model_parallelism_comes_after_data_parallelism_in_practice():
    from hvdcourse.course.book import course_map

    order = [row["lesson"] for row in course_map.lessons()]
    assert order.index("12_data_parallel_at_scale") > order.index("05_conversion")
    assert order.index("13_model_parallelism") > order.index("12_data_parallel_at_scale")
    plan = course_map.two_day_plan()
    taught = [t for t in plan["lesson"] if not t.startswith("(")]
    if "Model parallelism by hand" in taught:
        assert taught.index("Model parallelism by hand") > taught.index(
            "Converting a Keras MNIST script to Horovod"
        )


def test_lesson_blocks_add_measured_demo_minutes_rounded_up():
    from hvdcourse.course.book import course_map

    recorded = json.load(open(course_map.TIMES))["lessons"]
    for block in course_map.lesson_blocks(graded=False):
        seconds = recorded.get(block["lesson"], 0)
        assert block["demo_min"] == math.ceil(seconds / 60)


def _notebook(markdown, glued):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(markdown))
    code = nbformat.v4.new_code_cell("glue(...)")
    code.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={"application/papermill.record/text/plain": "1"},
            metadata={"scrapbook": {"name": key, "mime_prefix": ""}},
        )
        for key in glued
    ]
    nb.cells.append(code)
    return nb


def test_glue_references_without_a_glued_value_are_reported():
    from hvdcourse.course.book.book_build import unglued_references

    nb = _notebook(
        "It took {glue:text}`ring_ms:.1f` ms, {glue}`ratio` times.\n\n```{glue:figure} fig\n```",
        ["ratio"],
    )
    assert unglued_references(nb) == ["fig", "ring_ms"]


def test_every_glue_reference_glued_reports_nothing():
    from hvdcourse.course.book.book_build import glued_keys, unglued_references

    nb = _notebook(
        "From {glue:text}`a:,.0f` to {glue:text}`b` (and {glue:text}`other::c`).", ["a", "b"]
    )
    assert glued_keys(nb) == ["a", "b"] and unglued_references(nb) == []


def test_no_lesson_links_an_exercise_whose_lessons_come_later():
    import re
    from hvdcourse.course.book import course_map

    order = {row["title"]: i for i, row in enumerate(course_map.lessons())}
    needs = {}
    for name in os.listdir(course_map.EXERCISE_SOURCES):
        text = open(os.path.join(course_map.EXERCISE_SOURCES, name)).read()
        named = (
            re.search(r"^\*Lessons?: (.*?)(?: \(.*?\))?\. Time:", text, re.M | re.S)
            .group(1)
            .split("; ")
        )
        unknown = [title for title in named if title not in order]
        assert not unknown, f"{name} names lessons that the book does not have: {unknown}"
        needs[name[:-3]] = max(order[title] for title in named)
    linked = set()
    for row in course_map.lessons():
        text = open(os.path.join(ROOT, "notebooks", row["lesson"] + ".md")).read()
        for exercise in set(re.findall(r"exercises/(ex\d\d_\w+)\.ipynb", text)):
            linked.add(exercise)
            assert needs[exercise] <= order[row["title"]], (
                f"{row['lesson']} links {exercise} before its lesson"
            )
    assert linked == set(needs), f"exercises no lesson links: {sorted(set(needs) - linked)}"
