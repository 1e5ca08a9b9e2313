"""The generator (hvdcourse/course/exercises/generate.py): committed notebooks, fixed ids, loud failures."""

import json
import os

import pytest

from hvdcourse.course.exercises import generate, paths
from hvdcourse.course.exercises.markers import MarkerError
from hvdcourse.runtime.errors import run_cli

GOOD = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
hvdcourse:
  exercise: ex99
  title: "A test exercise"
---

# Exercise 99

```{code-cell} ipython3
def f():
    ### BEGIN SOLUTION
    return 1
    ### END SOLUTION
```
"""


def write_source(folder, name, text):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w") as fh:
        fh.write(text)


def test_committed_notebooks_are_what_the_sources_generate():
    stale = generate.generate(
        paths.SOURCE_DIR, paths.EXERCISES_DIR, paths.SOLUTIONS_DIR, check=True
    )
    assert stale == [], "run 'make exercises' and commit: " + ", ".join(stale)


def test_there_are_at_least_ten_exercises_each_with_both_versions():
    sources = sorted(
        f[:-3] for f in os.listdir(paths.SOURCE_DIR) if f.startswith("ex") and f.endswith(".md")
    )
    assert len(sources) >= 10
    for name in sources:
        assert os.path.isfile(os.path.join(paths.EXERCISES_DIR, name + ".ipynb"))
        assert os.path.isfile(os.path.join(paths.SOLUTIONS_DIR, name + ".ipynb"))


def test_learner_notebooks_contain_no_marker_and_one_placeholder_per_region():
    for name in sorted(os.listdir(paths.SOURCE_DIR)):
        source = open(os.path.join(paths.SOURCE_DIR, name)).read()
        learner = open(os.path.join(paths.EXERCISES_DIR, name[:-3] + ".ipynb")).read()
        assert "BEGIN SOLUTION" not in learner and "END SOLUTION" not in learner
        regions = source.count("### BEGIN SOLUTION")
        placeholders = learner.count('raise NotImplementedError(\\"Exercise') + learner.count(
            "**Your answer (Exercise"
        )
        assert placeholders == regions, name


def test_generated_notebooks_have_fixed_ids_and_no_outputs(tmp_path):
    write_source(str(tmp_path / "src"), "ex99_test.md", GOOD)
    generate.generate(str(tmp_path / "src"), str(tmp_path / "ex"), str(tmp_path / "sol"))
    nb = json.load(open(tmp_path / "ex" / "ex99_test.ipynb"))
    assert [c["id"] for c in nb["cells"]] == ["ex99-00", "ex99-01"]
    assert nb["cells"][1]["outputs"] == [] and nb["cells"][1]["execution_count"] is None
    assert nb["metadata"]["hvdcourse"] == {
        "exercise": "ex99",
        "title": "A test exercise",
        "version": "learner",
        "source": str(tmp_path / "src" / "ex99_test.md"),
    }


def test_generating_twice_gives_identical_bytes(tmp_path):
    write_source(str(tmp_path / "src"), "ex99_test.md", GOOD)
    generate.generate(str(tmp_path / "src"), str(tmp_path / "ex"), str(tmp_path / "sol"))
    first = open(tmp_path / "sol" / "ex99_test.ipynb").read()
    assert (
        generate.generate(str(tmp_path / "src"), str(tmp_path / "ex"), str(tmp_path / "sol")) == []
    )
    assert open(tmp_path / "sol" / "ex99_test.ipynb").read() == first


def test_nested_markers_fail_naming_the_file_and_the_cell(tmp_path):
    bad = GOOD.replace("    return 1\n", "    ### BEGIN SOLUTION\n    return 1\n")
    write_source(str(tmp_path / "src"), "ex99_test.md", bad)
    with pytest.raises(MarkerError, match=r"ex99_test\.md: cell 2 \(code\), line 3: .*nested"):
        generate.generate(str(tmp_path / "src"), str(tmp_path / "ex"), str(tmp_path / "sol"))


def test_a_malformed_source_writes_no_notebook_at_all(tmp_path):
    write_source(str(tmp_path / "src"), "ex98_good.md", GOOD.replace("ex99", "ex98"))
    write_source(str(tmp_path / "src"), "ex99_bad.md", GOOD.replace("    ### END SOLUTION\n", ""))
    with pytest.raises(MarkerError, match="never closed"):
        generate.generate(str(tmp_path / "src"), str(tmp_path / "ex"), str(tmp_path / "sol"))
    assert not os.path.exists(tmp_path / "ex")


def test_source_without_an_exercise_id_is_rejected(tmp_path):
    write_source(str(tmp_path / "src"), "ex99_test.md", GOOD.replace("  exercise: ex99\n", ""))
    with pytest.raises(MarkerError, match="front matter must contain"):
        generate.generate(str(tmp_path / "src"), str(tmp_path / "ex"), str(tmp_path / "sol"))


def test_check_mode_reports_a_stale_notebook_and_exits_1(tmp_path, capsys):
    write_source(str(tmp_path / "src"), "ex99_test.md", GOOD)
    args = [
        "--source",
        str(tmp_path / "src"),
        "--exercises",
        str(tmp_path / "ex"),
        "--solutions",
        str(tmp_path / "sol"),
    ]
    assert generate.main(args) == 0
    with open(tmp_path / "ex" / "ex99_test.ipynb", "a") as fh:
        fh.write(" ")
    assert run_cli(generate.main, ["--check", *args]) == 1
    out = capsys.readouterr()
    assert "stale:" in out.out
    assert (
        out.err.startswith("hvdcourse: error: generated notebooks differ")
        and out.err.count("\n") == 1
    )


def test_notebook_whose_source_was_removed_is_deleted(tmp_path):
    write_source(str(tmp_path / "src"), "ex99_test.md", GOOD)
    write_source(str(tmp_path / "src"), "ex98_test.md", GOOD.replace("ex99", "ex98"))
    generate.generate(str(tmp_path / "src"), str(tmp_path / "ex"), str(tmp_path / "sol"))
    os.remove(tmp_path / "src" / "ex98_test.md")
    assert str(tmp_path / "ex" / "ex98_test.ipynb") in generate.generate(
        str(tmp_path / "src"), str(tmp_path / "ex"), str(tmp_path / "sol")
    )
    assert not os.path.exists(tmp_path / "ex" / "ex98_test.ipynb")


def test_every_name_the_notebooks_read_from_checks_exists():
    # A name the notebooks use but checks.py lost (an import a linter took for unused) fails every
    # notebook that reads it only when the notebook runs; this finds it in a second.
    import re

    from hvdcourse.course.exercises import checks

    used = set()
    sources = os.path.join(paths.ROOT, "exercises", "source")
    for name in os.listdir(sources):
        if name.endswith(".md"):
            used |= set(re.findall(r"\bchecks\.(\w+)", open(os.path.join(sources, name)).read()))
    assert used and not [n for n in sorted(used) if not hasattr(checks, n)]
