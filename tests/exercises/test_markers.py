"""The solution-marker transform (hvdcourse/course/exercises/markers.py): placeholders, solutions, malformed markers."""

import ast

import pytest

from hvdcourse.course.exercises.markers import (
    MarkerError,
    clear_solutions,
    find_regions,
    strip_markers,
)

CELL = """def f(x):
    y = 1
    ### BEGIN SOLUTION
    return x + y
    ### END SOLUTION
"""


def test_code_region_becomes_a_placeholder_naming_the_exercise():
    out = clear_solutions(CELL, "code", "Exercise 3")
    assert 'raise NotImplementedError("Exercise 3: replace this line with your code")' in out
    assert "return x + y" not in out


def test_placeholder_keeps_the_indentation_of_the_marker():
    out = clear_solutions(CELL, "code", "Exercise 3").splitlines()
    assert out[2] == '    raise NotImplementedError("Exercise 3: replace this line with your code")'


def test_note_after_the_marker_becomes_the_placeholder_message():
    cell = "### BEGIN SOLUTION: write the ring allreduce here\nx = 1\n### END SOLUTION"
    assert (
        clear_solutions(cell, "code", "Exercise 4")
        == 'raise NotImplementedError("Exercise 4: write the ring allreduce here")'
    )


def test_placeholder_stays_valid_python_when_the_note_has_quotes():
    cell = 'def f():\n    ### BEGIN SOLUTION: return "yes" or \\no\n    pass\n    ### END SOLUTION'
    ast.parse(clear_solutions(cell, "code", "Exercise 1"))


def test_lines_outside_regions_are_kept_in_order():
    out = clear_solutions(CELL, "code", "Exercise 3").splitlines()
    assert out[:2] == ["def f(x):", "    y = 1"]


def test_each_region_of_a_cell_gets_its_own_placeholder():
    cell = "### BEGIN SOLUTION: one\na = 1\n### END SOLUTION\nb = 2\n### BEGIN SOLUTION: two\nc = 3\n### END SOLUTION"
    out = clear_solutions(cell, "code", "Exercise 5").splitlines()
    assert out == [
        'raise NotImplementedError("Exercise 5: one")',
        "b = 2",
        'raise NotImplementedError("Exercise 5: two")',
    ]


def test_markdown_region_becomes_an_answer_line():
    cell = "**Question.** Why?\n\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION"
    out = clear_solutions(cell, "markdown", "Exercise 2")
    assert out.endswith("**Your answer (Exercise 2):** _write it here_")
    assert "Because" not in out


def test_solution_version_drops_only_the_marker_lines():
    assert strip_markers(CELL) == "def f(x):\n    y = 1\n    return x + y"


def test_cell_without_markers_is_returned_unchanged():
    assert clear_solutions("x = 1\n", "code", "Exercise 1") == "x = 1\n"
    assert strip_markers("x = 1\n") == "x = 1\n"


def test_nested_begin_fails_naming_both_lines():
    cell = "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n### END SOLUTION"
    with pytest.raises(MarkerError, match=r"where, line 2: .*opened on line 1"):
        find_regions(cell, "where")


def test_unterminated_region_fails():
    with pytest.raises(MarkerError, match="line 1: '### BEGIN SOLUTION' is never closed"):
        clear_solutions("### BEGIN SOLUTION\nx = 1\n", "code", "Exercise 1")


def test_end_without_begin_fails():
    with pytest.raises(MarkerError, match="line 2: '### END SOLUTION' without"):
        strip_markers("x = 1\n### END SOLUTION\n")


@pytest.mark.parametrize(
    "line", ["## BEGIN SOLUTION", "### BEGIN SOLUTON", "### end solution", "#### END SOLUTION"]
)
def test_misspelt_marker_fails_instead_of_leaking_the_solution(line):
    with pytest.raises(MarkerError, match="malformed marker"):
        clear_solutions(f"{line}\nsecret = 1\n", "code", "Exercise 1")
