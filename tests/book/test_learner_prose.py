"""Learner pages speak to learners: no test-file paths or course-internal provenance in their prose.

How the book is built, which test checks a claim and what a source got wrong belong in the README, the
tests and the errata page, not in the steps a learner follows (issue 29). This scans the prose of every
page of ``_toc.yml`` except the instructors' part: code cells, literal includes, fenced code and figures
are left out, and so are instructor notes (an admonition whose class or title says "instructor").
Inline code is scanned for ``tests/`` paths (a path is a path, in backticks or not) but not for words.
"""

import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# directives whose body is code or a figure's source, not prose
CODE_FENCE = re.compile(
    r"^(?P<fence>`{3,}|~{3,})\s*(?:\{(?:code-cell|literalinclude|graphviz|mermaid|code-block|code)\}"
    r"|[\w+-]*\s*$)[^\n]*\n.*?^(?P=fence)\s*$",
    re.S | re.M,
)
# an admonition (colon fence) for instructors: its title or its class names them
INSTRUCTOR_BOX = re.compile(
    r"^(?P<fence>:{3,})\{admonition\}[^\n]*\n(?:(?:[^\n]*\n)*?)^(?P=fence)\s*$", re.M
)
TEST_PATH = re.compile(r"(?<![\w./-])tests/[\w./-]*")
# provenance: how the book is built and checked, said to a learner who cannot see it
# ("commit" and "the build" alone are no such words: Horovod Elastic commits its state, and a
# learner builds Horovod.)
PROVENANCE = re.compile(
    r"\b(?:this build of the book|the book's build|when the book is built|the book build|the CI|CI's"
    r"|in CI|a helper|the test suite|a test checks|the tests check|unit tests? checks?"
    r"|committed (?:to|in) (?:the|this) repository)\b",
    re.I,
)


def learner_pages() -> list:
    """The pages of _toc.yml a learner reads: the root and every part but the instructors'."""
    toc = yaml.safe_load(open(os.path.join(ROOT, "_toc.yml"), encoding="utf-8"))
    pages = [toc["root"]]
    for part in toc["parts"]:
        if "instructor" in part.get("caption", "").lower():
            continue
        pages += [chapter["file"] for chapter in part["chapters"]]
    return [page + ".md" for page in pages]


def _blank(match) -> str:
    """The matched text with every character but newlines blanked, so line numbers stay right."""
    return re.sub(r"[^\n]", " ", match.group(0))


def _blank_instructor_box(match) -> str:
    box = match.group(0)
    head = box.split("\n", 3)[:3]
    return _blank(match) if "instructor" in " ".join(head).lower() else box


def prose_lines(text: str) -> list:
    """[(line number, prose, inline code)] of a page: front matter, code, figures, comments and
    instructor notes blanked; inline code separated from the words around it."""
    text = re.sub(r"\A---\n.*?\n---\n", _blank, text, flags=re.S)
    text = CODE_FENCE.sub(_blank, text)
    text = INSTRUCTOR_BOX.sub(_blank_instructor_box, text)
    text = re.sub(r"<!--.*?-->", _blank, text, flags=re.S)
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        code = " ".join(re.findall(r"`([^`\n]*)`", line))
        words = re.sub(r"`[^`\n]*`", " ", line)
        words = re.sub(r"\]\([^)]*\)", "]", words)  # a link's target is not read
        lines.append((number, words, code))
    return lines


def findings(text: str) -> list:
    """[(line number, what)] for each test path or provenance phrase in a page's prose."""
    found = []
    for number, words, code in prose_lines(text):
        for path in TEST_PATH.findall(words + " " + code):
            found.append((number, f"test path {path!r}"))
        for phrase in PROVENANCE.findall(words):
            found.append((number, f"provenance {phrase!r}"))
    return found


@pytest.mark.parametrize("page", learner_pages())
def test_learner_page_prose_names_no_test_file_and_no_provenance(page):
    found = findings(open(os.path.join(ROOT, page), encoding="utf-8").read())
    assert not found, "\n".join(
        f"{page}:{number}: {what} - say it to the learner, or move it to the README, the tests "
        "or book/errata.md"
        for number, what in found
    )


def test_the_scan_sees_paths_and_provenance_in_prose_but_not_in_code_or_instructor_notes():
    page = (
        "---\nkernelspec: {}\n---\n"
        "The rule holds (`tests/examples/test_lr_rule.py` checks it).\n"
        "When the book is built the CI runs it; a helper keeps the data.\n"
        "```{code-cell} ipython3\nprint('tests/x.py, this build, commit')\n```\n"
        ":::{admonition} Instructor note\n:class: note\nRun the test suite and commit the JSON.\n:::\n"
        "Run `git commit` yourself; the elastic state is committed in memory.\n"
    )
    assert findings(page) == [
        (4, "test path 'tests/examples/test_lr_rule.py'"),
        (5, "provenance 'When the book is built'"),
        (5, "provenance 'the CI'"),
        (5, "provenance 'a helper'"),
    ]


def test_every_learner_page_of_the_toc_exists():
    missing = [page for page in learner_pages() if not os.path.isfile(os.path.join(ROOT, page))]
    assert not missing
