"""The book executes through myst-nb's cache: an unchanged page is not executed again, a change to
what it runs (the package) executes it again, and its execution time comes from myst-nb's data.

A throwaway book of one small page in tmp_path, built by ``hvdcourse.course.book.book_build`` with the course's
own ``_config.yml`` (the real book takes minutes): the page's code cell appends a line to a file on
every execution, so the file counts the executions.
"""

import os
import re
import time

import pytest
import yaml

from hvdcourse.course.book import book_build
from hvdcourse.runtime.errors import RunFailed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PAGE = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A small page

Executing this page took {execution-time}`page`.

```{code-cell} ipython3
import minipkg
print(minipkg.run())
```
"""
PACKAGE = '''import os

ANSWER = {answer}


def run():
    """Count this execution in runs.log (beside the package) and return the answer."""
    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "runs.log"), "a") as fh:
        fh.write("run\\n")
    return f"answer {{ANSWER}}"
'''


def make_book(root):
    config = yaml.safe_load(open(os.path.join(ROOT, "_config.yml")))
    config["title"] = "Mini book"
    (root / "_config.yml").write_text(yaml.safe_dump(config))
    (root / "_toc.yml").write_text("format: jb-book\nroot: page\n")
    (root / "page.md").write_text(PAGE)
    (root / "minipkg").mkdir()
    (root / "minipkg" / "__init__.py").write_text(PACKAGE.format(answer=41))


def build(root, capsys):
    assert book_build.build_book(timeout=300, root=str(root), inputs=("minipkg",)) == 0, (
        capsys.readouterr().out
    )
    html = (root / "_build" / "html" / "page.html").read_text()
    runs = (root / "runs.log").read_text().count("run")
    return html, runs, capsys.readouterr().out


def test_unchanged_page_is_not_executed_again_and_a_package_change_executes_it(tmp_path, capsys):
    make_book(tmp_path)
    html, runs, out = build(tmp_path, capsys)
    assert runs == 1 and "answer 41" in html
    assert "1 of 1 pages executed" in out

    html, runs, out = build(tmp_path, capsys)  # nothing changed: outputs from myst-nb's cache
    assert runs == 1 and "answer 41" in html
    assert "0 of 1 pages executed" in out and "page: from the cache" in out

    (tmp_path / "page.md").write_text(PAGE.replace("# A small page", "# A small page, retitled"))
    # page read again, its code unchanged: jupyter-cache's outputs
    html, runs, out = build(tmp_path, capsys)
    assert runs == 1 and "answer 41" in html and "retitled" in html
    assert "0 of 1 pages executed" in out

    # the page's code is unchanged
    (tmp_path / "minipkg" / "__init__.py").write_text(PACKAGE.format(answer=42))
    html, runs, out = build(tmp_path, capsys)
    assert runs == 2 and "answer 42" in html and "answer 41" not in html
    assert "every page executes" in out and "1 of 1 pages executed" in out


def test_the_role_shows_the_time_myst_nb_measured(tmp_path, capsys):
    make_book(tmp_path)
    html, _, _ = build(tmp_path, capsys)
    times = book_build.execution_times(str(tmp_path))
    assert times["page"]["method"] == "cache" and times["page"]["succeeded"] is True
    seconds = times["page"]["runtime"]
    shown = f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.1f}"
    date = time.strftime("%Y-%m-%d", time.localtime(times["page"]["mtime"]))
    text = re.sub(r"<[^>]+>", "", html)
    assert f"Executing this page took {shown} s (executed {date} on " in text


def test_a_failing_page_fails_the_build_and_the_next_build_reads_it_again(tmp_path, capsys):
    make_book(tmp_path)
    build(tmp_path, capsys)
    (tmp_path / "page.md").write_text(
        PAGE.replace("print(minipkg.run())", "raise RuntimeError('broken')")
    )
    with pytest.raises(RunFailed, match="jupyter-book failed"):
        book_build.build_book(timeout=300, root=str(tmp_path), inputs=("minipkg",))
    assert not (tmp_path / "_build" / ".doctrees" / "environment.pickle").exists()


def test_the_digest_covers_the_package_but_not_the_pages_or_the_recorded_times(tmp_path):
    for name in ("hvdcourse", "notebooks", "book/data"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "hvdcourse" / "x.py").write_text("A = 1\n")
    (tmp_path / "notebooks" / "01.md").write_text("# One\n")
    (tmp_path / "book" / "data" / "execution_times.json").write_text("{}")
    (tmp_path / "book" / "data" / "bench.json").write_text("{}")
    (tmp_path / "requirements.txt").write_text("numpy\n")
    before = book_build.inputs_digest(str(tmp_path))
    (tmp_path / "notebooks" / "01.md").write_text("# One, edited\n")
    (tmp_path / "book" / "data" / "execution_times.json").write_text('{"lessons": {}}')
    assert book_build.inputs_digest(str(tmp_path)) == before
    for changed in ("hvdcourse/x.py", "requirements.txt", "book/data/bench.json"):
        (tmp_path / changed).write_text("changed\n")
        assert book_build.inputs_digest(str(tmp_path)) != before, changed
        before = book_build.inputs_digest(str(tmp_path))


def test_a_data_file_that_appears_changes_the_digest(tmp_path):
    # an absolute input, like hvdcourse.examples.data.KERAS_CACHE
    data = tmp_path / "keras" / "mnist.npz"
    before = book_build.inputs_digest(str(tmp_path), inputs=(str(data),))
    data.parent.mkdir()
    data.write_bytes(b"full MNIST")
    assert book_build.inputs_digest(str(tmp_path), inputs=(str(data),)) != before


def make_book_of_lessons(root, names):
    """A mini book whose chapters are lessons in notebooks/ (the pages the build executes at once)."""
    make_book(root)
    (root / "notebooks").mkdir()
    for name in names:
        page = PAGE.replace("# A small page", f"# {name}")
        # code of its own: jupyter-cache keys a page by its code (the same code shares one entry)
        page = page.replace("print(minipkg.run())", f"print(minipkg.run(), {name!r})")
        (root / "notebooks" / f"{name}.md").write_text(page)
    chapters = "".join(f"      - file: notebooks/{name}\n" for name in names)
    (root / "_toc.yml").write_text(
        f"format: jb-book\nroot: page\nparts:\n  - caption: Lessons\n    chapters:\n{chapters}"
    )


def test_lessons_executed_at_once_are_taken_from_the_cache_by_the_build(tmp_path, capsys):
    make_book_of_lessons(tmp_path, ["one", "two"])
    code = book_build.build_book(timeout=300, root=str(tmp_path), inputs=("minipkg",), jobs=2)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "executing 2 lessons, 2 at a time" in out
    # each lesson ran once (before the build), the root page once (by the build itself)
    assert (tmp_path / "runs.log").read_text().count("run") == 3
    times = book_build.execution_times(str(tmp_path))
    for name in ("one", "two"):
        html = (tmp_path / "_build" / "html" / "notebooks" / f"{name}.html").read_text()
        assert "answer 41" in html
        assert times[name]["succeeded"] is True and times[name]["runtime"] > 0


def test_a_lesson_failing_when_executed_at_once_fails_the_build(tmp_path, capsys):
    make_book_of_lessons(tmp_path, ["one", "two"])
    broken = tmp_path / "notebooks" / "two.md"
    broken.write_text(broken.read_text().replace("print(minipkg.run(), 'two')", "raise ValueError"))
    with pytest.raises(RunFailed, match="jupyter-book failed"):
        book_build.build_book(timeout=300, root=str(tmp_path), inputs=("minipkg",), jobs=2)
    assert "a cell failed; the build runs it again to show it" in capsys.readouterr().out
