"""Generate the learner and solution notebooks from the exercise sources (``make exercises``).

``exercises/source/exNN_*.md`` (MyST notebooks with solution markers) is the one source of each
exercise; this writes ``exercises/exNN_*.ipynb`` (solutions replaced by placeholders) and
``solutions/exNN_*.ipynb`` (markers removed). Output is deterministic: no outputs, cell ids derived
from the exercise id and the cell's position, sorted JSON keys, so ``--check`` (and a test) can
regenerate and compare byte for byte.

``python -m hvdcourse.course.exercises.generate``          write both versions of every exercise
``python -m hvdcourse.course.exercises.generate --check``  only compare with what is on disk (exit 1 if stale)
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import sys

from hvdcourse.course.exercises import paths
from hvdcourse.course.exercises.markers import MarkerError, clear_solutions, strip_markers
from hvdcourse.runtime.errors import CheckFailed, run_cli

ID_PATTERN = re.compile(r"^ex(\d\d)$")
KEEP_CELL_METADATA = ("tags",)


def exercise_label(exercise_id: str) -> str:
    """``ex04`` -> ``Exercise 4`` (the prefix of every placeholder)."""
    return f"Exercise {int(ID_PATTERN.match(exercise_id).group(1))}"


def read_source(path: str):
    """Read one MyST source; check it names its exercise (front matter ``hvdcourse: {exercise: exNN}``)."""
    import jupytext

    nb = jupytext.read(path)
    info = nb.metadata.get("hvdcourse") or {}
    exercise_id = str(info.get("exercise", ""))
    stem = os.path.basename(path)[:-3]
    if not ID_PATTERN.match(exercise_id) or not stem.startswith(exercise_id + "_"):
        raise MarkerError(
            f"{_rel(path)}: the front matter must contain 'hvdcourse: {{exercise: exNN}}' "
            f"matching the file name (got {exercise_id!r} for {stem}.md)"
        )
    return nb, info


def build(path: str, version: str):
    """The ``version`` ('learner' or 'solution') notebook of the source at ``path``."""
    import nbformat

    source_nb, info = read_source(path)
    exercise_id = info["exercise"]
    label = exercise_label(exercise_id)
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "hvdcourse": {
            "exercise": exercise_id,
            "title": info.get("title", ""),
            "version": version,
            "source": _rel(path),
        },
    }
    for index, cell in enumerate(source_nb.cells):
        where = f"{_rel(path)}: cell {index + 1} ({cell.cell_type})"
        if version == "learner":
            text = clear_solutions(cell.source, cell.cell_type, label, where)
        else:
            text = strip_markers(cell.source, where)
        if cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(text)
        elif cell.cell_type == "markdown":
            new = nbformat.v4.new_markdown_cell(text)
        else:
            new = nbformat.v4.new_raw_cell(text)
        # fixed ids: stable diffs (nbformat would draw random ones)
        new.id = f"{exercise_id}-{index:02d}"
        new.metadata = {k: cell.metadata[k] for k in KEEP_CELL_METADATA if k in cell.metadata}
        nb.cells.append(new)
    nbformat.validate(nb)
    return nb


def render(nb) -> str:
    import nbformat

    return nbformat.writes(nb, version=4) + "\n"


def targets(source_dir: str, exercises_dir: str, solutions_dir: str) -> dict:
    """{output path: (source path, version)} for every source."""
    out = {}
    for path in sorted(glob.glob(os.path.join(source_dir, "ex*.md"))):
        name = os.path.basename(path)[:-3] + ".ipynb"
        out[os.path.join(exercises_dir, name)] = (path, "learner")
        out[os.path.join(solutions_dir, name)] = (path, "solution")
    return out


def generate(source_dir: str, exercises_dir: str, solutions_dir: str, check: bool = False) -> list:
    """Write (or, with ``check``, compare) every generated notebook; return the stale paths."""
    wanted = targets(source_dir, exercises_dir, solutions_dir)
    if not wanted:
        raise MarkerError(f"no exercise sources (ex*.md) in {source_dir}")
    # all or nothing
    rendered = {out: render(build(src, version)) for out, (src, version) in wanted.items()}
    stale = []
    for out_path, text in rendered.items():
        current = open(out_path, encoding="utf-8").read() if os.path.isfile(out_path) else None
        if current != text:
            stale.append(out_path)
            if not check:
                os.makedirs(os.path.dirname(out_path), exist_ok=True)
                with open(out_path, "w", encoding="utf-8") as fh:
                    fh.write(text)
    for folder in (exercises_dir, solutions_dir):  # notebooks whose source is gone
        for path in sorted(glob.glob(os.path.join(folder, "ex*.ipynb"))):
            if path not in wanted:
                stale.append(path)
                if not check:
                    os.remove(path)
    return stale


def _rel(path: str) -> str:
    return os.path.relpath(path, paths.ROOT) if path.startswith(paths.ROOT) else path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the files on disk, write nothing"
    )
    parser.add_argument("--source", default=paths.SOURCE_DIR, help="folder of the MyST sources")
    parser.add_argument(
        "--exercises", default=paths.EXERCISES_DIR, help="learner notebooks go here"
    )
    parser.add_argument(
        "--solutions", default=paths.SOLUTIONS_DIR, help="solution notebooks go here"
    )
    args = parser.parse_args(argv)
    # MarkerError: exit 2
    stale = generate(args.source, args.exercises, args.solutions, check=args.check)
    if args.check:
        for path in stale:
            print(f"stale: {_rel(path)}")
        if stale:
            raise CheckFailed(
                "generated notebooks differ from their sources; run 'make exercises' and commit"
            )
        print(
            f"all {len(targets(args.source, args.exercises, args.solutions))} generated notebooks are up to date"
        )
        return 0
    print(
        f"wrote {len(stale)} notebook(s); "
        f"{len(targets(args.source, args.exercises, args.solutions)) - len(stale)} already up to date"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
