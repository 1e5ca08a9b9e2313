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

PAGES = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.md"))) + sorted(
    glob.glob(os.path.join(ROOT, "book", "*.md"))
)
MODULES = sorted(glob.glob(os.path.join(ROOT, "hvdcourse", "**", "*.py"), recursive=True))

# A reference opens a line, a sentence, a parenthesis or follows "; ", and runs to ")" or the end of a sentence.
REFERENCE = re.compile(
    r"(?:^|(?<=[(;.])\s*|\n\s*)lessons?:\s*(.+?)(?=\)|\.\s|\.$|$)", re.IGNORECASE | re.DOTALL
)


def title(page: str) -> str:
    for line in open(page, encoding="utf-8"):
        if line.startswith("# "):
            return line[2:].strip()
    raise AssertionError(f"{os.path.relpath(page, ROOT)} has no '# ' title heading")


def docstrings(path: str):
    """(name, docstring) of the module and of each of its classes and functions."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in [tree] + [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]:
        text = ast.get_docstring(node, clean=False)
        if text:
            yield getattr(node, "name", "<module>"), text


def lesson_references(text: str) -> list:
    return [
        " ".join(name.split())
        for match in REFERENCE.finditer(text)
        for name in match.group(1).split(";")
    ]


def test_reference_parsing_reads_one_or_several_titles():
    text = "Ring cost (lesson: Parameter servers and ring-allreduce).\n\nLessons: Faults, hangs and elastic\ntraining; Beyond Horovod."
    assert lesson_references(text) == [
        "Parameter servers and ring-allreduce",
        "Faults, hangs and elastic training",
        "Beyond Horovod",
    ]
    assert (
        lesson_references("{lesson: [(exercise, minutes)]}: for executing lessons: the environment")
        == []
    )


def test_docstrings_name_lessons_by_their_exact_titles():
    titles = {title(page) for page in PAGES}
    wrong = [
        f"{os.path.relpath(path, ROOT)}: {name}: {reference!r}"
        for path in MODULES
        for name, text in docstrings(path)
        for reference in lesson_references(text)
        if reference not in titles
    ]
    assert not wrong, (
        "these lesson names are not the title ('# ' heading) of any page of the book, "
        f"{sorted(titles)}:\n" + "\n".join(wrong)
    )


# --- Source documents are cited by their short names (hvdcourse.course.lessons.sources), never as "seeds" ---
# "seed 002", "seed004_table", "the seed's mask list", "seed talk", "the seeds": a source document. Random
# seeds ("seed=42", "--seed", "its own seed", "3 seeds", "seed + rank") do not match.
SOURCE_CALLED_SEED = re.compile(
    r"\bseed[ _]?\d{3}"  # seed 002, SEED_004, seed004_table
    # the seed's mask list, the seeds' check script
    r"|\bseeds?(?:'s|')"
    r"|\bseeds?[ -](?:talk|guide|slides?|material|documents?|tables?|code|scripts?)\b"
    r"|\b(?:the|these|first|second|third|fourth|fifth|one) seeds?\b(?! *=|-to-)",
    re.IGNORECASE,
)
# the documents' folder outside the clone: a path, not a name
SOURCES_FOLDER = "/work/shared/seeds/"


def tracked_text_files() -> list:
    names = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    if not names:  # not a git clone (an unpacked archive): every page, module and test
        names = [
            os.path.relpath(p, ROOT)
            for pattern in (
                "notebooks/*.md",
                "book/*.md",
                "README.md",
                "exercises/source/*.md",
                "hvdcourse/**/*.py",
                "tests/**/*.py",
                "slurm/**/*",
            )
            for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)
            if os.path.isfile(p)
        ]
    return [
        name
        for name in names
        if name.endswith((".md", ".py", ".sh", ".toml", ".yml", ".txt", "Makefile"))
        and not name.startswith(("exercises/ex", "solutions/"))
        and name != "tests/project/test_docstrings.py"
    ]


def source_called_seed(text: str) -> list:
    return [m.group(0) for m in SOURCE_CALLED_SEED.finditer(text.replace(SOURCES_FOLDER, ""))]


def test_seed_pattern_tells_source_documents_from_random_seeds():
    assert source_called_seed(
        "seed 002's typo; a seed's mask list; seed004_table(); a seed talk; "
        "as on the seed slides; the first seed"
    ) == ["seed 002", "seed's", "seed004", "seed talk", "the seed", "first seed"]
    assert (
        source_called_seed(
            "seed=42, --seed 3, set_random_seed(1), each rank has its own seed, 3 seeds, "
            "seed + hvd.rank(), the same seed on every rank, seed-to-seed scatter, /work/shared/seeds/x.txt"
        )
        == []
    )


def test_no_page_module_or_test_calls_a_source_document_a_seed():
    found = [
        f"{name}:{number}: {hit!r}: {line.strip()[:100]}"
        for name in tracked_text_files()
        for number, line in enumerate(
            open(os.path.join(ROOT, name), encoding="utf-8", errors="replace"), 1
        )
        for hit in source_called_seed(line)
    ]
    assert not found, (
        "cite a source document by its short name (hvdcourse.course.lessons.sources, the book's "
        "'Sources'), not as a seed:\n" + "\n".join(found)
    )
