"""Docstrings name the lessons by their titles, and no page, module or test calls a source document a "seed".

Rule: every name after ``lesson:`` / ``lessons:`` in a docstring (names separated by ``; ``) is the first
``# `` heading of a page of the book (notebooks/*.md, book/*.md), character for character.
"""
import ast
import glob
import os
import re
import subprocess

from conftest import ROOT

PAGES = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.md"))) + sorted(glob.glob(os.path.join(ROOT, "book", "*.md")))
MODULES = sorted(glob.glob(os.path.join(ROOT, "hvdcourse", "**", "*.py"), recursive=True))

# A reference opens a line, a sentence, a parenthesis or follows "; ", and runs to ")" or the end of a sentence.
REFERENCE = re.compile(r"(?:^|(?<=[(;.])\s*|\n\s*)lessons?:\s*(.+?)(?=\)|\.\s|\.$|$)", re.IGNORECASE | re.DOTALL)


def title(page: str) -> str:
    for line in open(page, encoding="utf-8"):
        if line.startswith("# "):
            return line[2:].strip()
    raise AssertionError(f"{os.path.relpath(page, ROOT)} has no '# ' title heading")


def docstrings(path: str):
    """(name, docstring) of the module and of each of its classes and functions."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]:
        text = ast.get_docstring(node, clean=False)
        if text:
            yield getattr(node, "name", "<module>"), text


def lesson_references(text: str) -> list:
    return [" ".join(name.split()) for match in REFERENCE.finditer(text) for name in match.group(1).split(";")]


def test_reference_parsing_reads_one_or_several_titles():
    text = "Ring cost (lesson: Parameter servers and ring-allreduce).\n\nLessons: Faults, hangs and elastic\ntraining; Beyond Horovod."
    assert lesson_references(text) == ["Parameter servers and ring-allreduce", "Faults, hangs and elastic training",
                                       "Beyond Horovod"]
    assert lesson_references("{lesson: [(exercise, minutes)]}: for executing lessons: the environment") == []


def test_docstrings_name_lessons_by_their_exact_titles():
    titles = {title(page) for page in PAGES}
    wrong = [f"{os.path.relpath(path, ROOT)}: {name}: {reference!r}"
             for path in MODULES for name, text in docstrings(path)
             for reference in lesson_references(text) if reference not in titles]
    assert not wrong, ("these lesson names are not the title ('# ' heading) of any page of the book, "
                       f"{sorted(titles)}:\n" + "\n".join(wrong))
