"""How long each graded exercise takes a learner: read, write, run (the stated "Time: N minutes").

The time a source states is measured, not guessed, in three parts:

* **read**: the words of the learner notebook (its markdown cells and the code it gives to read,
  solution regions left out) and what the solution notebook's cells print, the checks' reports left
  out (a script to debug, a table to choose from), at :data:`RATES` ``read_wpm``;
* **write**: what the solution regions ask them to write (:func:`markers.find_regions`): lines of
  code (blank and comment-only lines left out; the Python tokens are recorded too) at
  ``write_code_lpm``, and words of prose answers at ``write_prose_wpm``;
* **run**: the wall time of executing the solution notebook, every cell and its check (the checks
  run the learner's function on 2 MPI ranks), the way tests/exercises/test_exercise_notebooks.py
  executes it; run once, then again after each of ``debug_tries`` fixes, each fix costing
  ``fix_min`` minutes of reading the check's report and changing a line.

The estimate, rounded up to the next 5 minutes, is each source's stated time (a test compares them).
The rates and where they come from are in :data:`RATES` and the JSON file; the rates labelled
"course assumption" are the course's choices, not measurements.

``python -m hvdcourse.course.exercises.timing``                run every solution notebook, one at a time,
                                                             and write book/data/exercise_times.json
``python -m hvdcourse.course.exercises.timing --only ex05``    measure one exercise (keep the others' figures)
``python -m hvdcourse.course.exercises.timing --counts-only``  recount read and write from the sources; keep
                                                             the recorded run times (no notebook runs)
``python -m hvdcourse.course.exercises.timing --set-times``    write each source's "Time: N minutes" from the
                                                             JSON file (then ``make exercises``)
"""

from __future__ import annotations

import argparse
import datetime
import glob
import io
import json
import math
import os
import re
import sys
import tempfile
import textwrap
import time
import tokenize

from hvdcourse.course.exercises import paths
from hvdcourse.course.exercises.markers import find_regions
from hvdcourse.runtime.errors import CheckFailed, UsageError, run_cli
from hvdcourse.runtime.paths import BOOK_DATA

TIMES = os.path.join(BOOK_DATA, "exercise_times.json")
ROUND_TO = 5  # minutes: a stated time is the estimate rounded up to a multiple of this
STATED = re.compile(r"Time:\s*(\d+)\s*minutes")

RATES = {
    "read_wpm": 138,
    "read_source": (
        "Carver, R. P. (1992). Reading rate: theory, research, and practical implications. Journal of "
        "Reading 36(2), 84-95: the 'memorizing' gear, 138 words/min, the slower of the two gears of "
        "reading to learn (the 'learning' gear is 200): technical text that must be acted on, for "
        "learners most of whom read English as a second language. Code given to read counts as "
        "words (whitespace-separated) at the same rate."
    ),
    "write_code_lpm": 1.0,
    "write_code_source": (
        "course assumption (not a measurement): a novice writes one line of solution code per minute "
        "when the exercise names the functions to call; blank and comment-only lines are not "
        "counted."
    ),
    "write_prose_wpm": 19,
    "write_prose_source": (
        "Karat, C.-M., Halverson, C., Horn, D., Karat, J. (1999). Patterns of entry and correction in "
        "large vocabulary continuous speech recognition systems. CHI '99, 568-575: composing text with "
        "a keyboard, 19 words/min (transcription: 32.5)."
    ),
    "debug_tries": 2,
    "fix_min": 1.0,
    "debug_source": (
        "course assumption (not a measurement): two failed tries before the check passes, each "
        "costing one more run of the notebook and a minute to read the check's report and change "
        "a line."
    ),
}


# ------------------------------------------------------------------------------------ counting


def sources(source_dir: str = paths.SOURCE_DIR) -> dict:
    """{exercise stem (``ex05_conversion``): path of its MyST source}, sorted."""
    return {
        os.path.basename(p)[:-3]: p for p in sorted(glob.glob(os.path.join(source_dir, "ex*.md")))
    }


def _words(text: str) -> int:
    return len(text.split())


_LAYOUT = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
    tokenize.ENCODING,
}


def written(code: str) -> tuple:
    """``(lines, tokens)`` a learner types for ``code``: the lines that hold a Python token (a line of
    a multi-line string counts, a blank or comment-only line does not) and the number of tokens
    (names, operators, literals; a string is one)."""
    text = textwrap.dedent(code) + "\n"
    try:
        found = [
            t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in _LAYOUT
        ]
    except (tokenize.TokenError, IndentationError, SyntaxError):  # not Python: every non-blank line
        lines = [
            line for line in code.splitlines() if line.strip() and not line.strip().startswith("#")
        ]
        return len(lines), len(re.findall(r"\w+|[^\w\s]", "\n".join(lines)))
    source = text.splitlines()
    rows = {
        row
        for token in found
        for row in range(token.start[0], token.end[0] + 1)
        if source[row - 1].strip()
    }
    return len(rows), len(found)


def counts(path: str) -> dict:
    """What a learner reads and writes in the exercise whose source is ``path``.

    Read: the words of the markdown and of the code that the learner version gives (every line
    outside the solution regions, which become placeholders there). Write: the solution regions' code lines
    and tokens, and their prose words.
    """
    from hvdcourse.course.exercises.generate import read_source

    nb, _ = read_source(path)
    read_prose = read_code = code_lines = code_tokens = prose_words = 0
    for index, cell in enumerate(nb.cells):
        where = f"{os.path.basename(path)}: cell {index + 1}"
        lines = cell.source.splitlines()
        inside = set()
        for begin, end, _, _ in find_regions(cell.source, where):
            region = lines[begin + 1 : end]
            inside.update(range(begin, end + 1))
            if cell.cell_type == "code":
                lines_typed, tokens_typed = written("\n".join(region))
                code_lines += lines_typed
                code_tokens += tokens_typed
            else:
                prose_words += _words("\n".join(region))
        given = "\n".join(line for n, line in enumerate(lines) if n not in inside)
        if cell.cell_type == "code":
            read_code += _words(given)
        elif cell.cell_type == "markdown":
            read_prose += _words(given)
    return {
        "read_prose_words": read_prose,
        "read_code_words": read_code,
        "write_code_lines": code_lines,
        "write_code_tokens": code_tokens,
        "write_prose_words": prose_words,
    }


def stated_minutes(path: str):
    """The minutes the source's opening line states ("Time: N minutes"), or None."""
    found = STATED.search(open(path, encoding="utf-8").read())
    return int(found.group(1)) if found else None


# ------------------------------------------------------------------------------------ the estimate


def rounded(minutes: float) -> int:
    """``minutes`` rounded up to the next multiple of :data:`ROUND_TO` (the stated time)."""
    return int(math.ceil(round(minutes, 6) / ROUND_TO) * ROUND_TO)


def estimate(count: dict, run_s: float, rates: dict = RATES) -> dict:
    """The minutes of each part and the total, from the counts and the measured run seconds."""
    words = count["read_prose_words"] + count["read_code_words"] + count.get("read_output_words", 0)
    read = words / rates["read_wpm"]
    write = (
        count["write_code_lines"] / rates["write_code_lpm"]
        + count["write_prose_words"] / rates["write_prose_wpm"]
    )
    run = run_s / 60 * (1 + rates["debug_tries"])
    debug = rates["debug_tries"] * rates["fix_min"]
    total = read + write + run + debug
    return {
        "read_min": round(read, 1),
        "write_min": round(write, 1),
        "run_min": round(run, 1),
        "debug_fix_min": round(debug, 1),
        "total_min": round(total, 1),
        "stated_min": rounded(total),
    }


# ------------------------------------------------------------------------------------ running


def execute_notebook(nb, folder: str, **hooks):
    """Run every cell of ``nb`` in a fresh kernel in ``folder`` with the course's MPI environment,
    errors kept in the outputs (the exercise tests and :func:`run_solution` run notebooks this one
    way); ``hooks`` are nbclient's (``on_cell_start``, ``on_cell_executed``). Returns ``nb``."""
    from nbclient import NotebookClient

    from hvdcourse.runtime.mpienv import launch_env

    env = launch_env({"MPLBACKEND": "Agg", "IPYTHONDIR": os.path.join(folder, ".ipython")})
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": folder}},
        **hooks,
    ).execute(env=env)
    return nb


def run_solution(stem: str, solutions_dir: str = paths.SOLUTIONS_DIR) -> dict:
    """Execute the solution notebook ``stem`` as the exercise tests do (:func:`execute_notebook`);
    return its wall seconds (kernel start included), the seconds of its check cells, and whether
    every check passed."""
    import nbformat

    nb = nbformat.read(os.path.join(solutions_dir, stem + ".ipynb"), as_version=4)
    cell_seconds = {}
    started = {}

    def on_start(cell, cell_index):
        started[cell_index] = time.monotonic()

    def on_executed(cell, cell_index, **_):  # nbclient: after the cell's reply came back
        cell_seconds[cell_index] = time.monotonic() - started.get(cell_index, time.monotonic())

    with tempfile.TemporaryDirectory(prefix=f"hvdcourse-timing-{stem}-") as folder:
        begin = time.monotonic()
        execute_notebook(nb, folder, on_cell_start=on_start, on_cell_executed=on_executed)
        wall = time.monotonic() - begin
    checks = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and re.search(r"^checks\.ex\d\d_", c.source, re.M)
    ]
    reports = [
        "".join(
            o.get("text", "")
            for o in nb.cells[i].get("outputs", [])
            if o.get("output_type") == "stream"
        )
        for i in checks
    ]
    printed = sum(
        len(text.split())
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and i not in checks
        for text in _printed(c)
    )
    errors = [
        f"cell {i}: {o.ename}: {o.evalue}"
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.output_type == "error"
    ]
    passed = bool(reports) and all(re.search(r"all \d+ checks passed", r) for r in reports)
    return {
        "run_s": round(wall, 1),
        "check_s": round(sum(cell_seconds.get(i, 0.0) for i in checks), 1),
        "read_output_words": printed,
        "passed": passed and not errors,
        "errors": errors,
    }


def _printed(cell) -> list:
    """What a cell shows a learner as text: its standard output and the plain-text form of its
    results (not standard error: warnings and logs are not read; not the reports of the checks)."""
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stdout":
            texts.append(output.get("text", ""))
        elif output.get("output_type") in ("execute_result", "display_data"):
            data = output.get("data", {})
            if "text/plain" in data and not any(k.startswith("image/") for k in data):
                texts.append(data["text/plain"])
    return texts


# ------------------------------------------------------------------------------------ the file


def machine() -> str:
    """CPU, cores and memory of this machine, in words (the run times depend on it; each exercise
    records the machine's load before its run)."""
    from hvdcourse.runtime.machine import cpu_model, memory_gib

    return f"{cpu_model()}, {os.cpu_count()} cores, {memory_gib():.0f} GiB"


def load(path: str = TIMES) -> dict:
    if not os.path.isfile(path):
        return {"exercises": {}}
    return json.load(open(path, encoding="utf-8"))


def write(data: dict, path: str = TIMES) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, ensure_ascii=False)
        fh.write("\n")


def measure(
    only=(), counts_only=False, path: str = TIMES, source_dir: str = paths.SOURCE_DIR
) -> dict:
    """Count (and, unless ``counts_only``, run) every exercise, or those in ``only``; merge into the
    file at ``path`` and return its data. Refuses to record a solution whose checks fail."""
    data = load(path)
    recorded = data.get("exercises", {})
    found = sources(source_dir)
    unknown = [name for name in only if not any(s.startswith(name) for s in found)]
    if unknown:
        raise UsageError(f"no exercise source for {', '.join(unknown)} in {source_dir}")
    chosen = [s for s in found if not only or any(s.startswith(name) for name in only)]
    header_machine = data.get("machine")
    runs = {}
    if not counts_only:
        header_machine = machine()
        for stem in chosen:  # one at a time: the 2-rank checks share the machine's cores
            print(f"{stem}: running the solution notebook ...", flush=True)
            load_before = os.getloadavg()[0]
            result = run_solution(stem)
            result["load_1min_before"] = round(load_before, 2)
            if not result["passed"]:
                why = result["errors"] or "no check printed 'all N checks passed'"
                raise CheckFailed(
                    f"{stem}: the solution notebook did not pass its checks ({why}); "
                    "fix it before timing it"
                )
            runs[stem] = result
            print(f"{stem}: {result['run_s']} s (checks {result['check_s']} s)", flush=True)
    exercises = {}
    for stem in found:
        old = recorded.get(stem, {})
        if stem not in chosen:
            if old:
                exercises[stem] = old
            continue
        kept = ("run_s", "check_s", "read_output_words", "load_1min_before")
        run = runs.get(stem) or {k: old[k] for k in kept if k in old}
        if "run_s" not in run:
            raise UsageError(
                f"{stem}: no recorded run time; run without --counts-only first "
                f"(python -m hvdcourse.course.exercises.timing --only {stem[:4]})"
            )
        count = {**counts(found[stem]), "read_output_words": run.get("read_output_words", 0)}
        exercises[stem] = {
            **count,
            "run_s": run["run_s"],
            "check_s": run.get("check_s"),
            "load_1min_before": run.get("load_1min_before"),
            **estimate(count, run["run_s"]),
        }
    data = {
        "machine": header_machine,
        "date": datetime.date.today().isoformat() if not counts_only else data.get("date"),
        "counted": datetime.date.today().isoformat(),
        "how": (
            "total = read + write + run x (1 + debug_tries) + debug_tries x fix_min; the stated time is "
            f"the total rounded up to a multiple of {ROUND_TO} min (hvdcourse.course.exercises.timing)"
        ),
        "load_1min_before_runs": _load_range(exercises),
        "rates": RATES,
        "exercises": exercises,
    }
    write(data, path)
    return data


def _load_range(exercises: dict):
    loads = [row["load_1min_before"] for row in exercises.values() if row.get("load_1min_before")]
    return [min(loads), max(loads)] if loads else None


def set_times(path: str = TIMES, source_dir: str = paths.SOURCE_DIR) -> list:
    """Write each source's "Time: N minutes" from the file's estimates; return the changed sources."""
    recorded = load(path)["exercises"]
    changed = []
    for stem, source in sources(source_dir).items():
        if stem not in recorded:
            raise UsageError(f"{stem}: not in {path}; measure it first (--only {stem[:4]})")
        text = open(source, encoding="utf-8").read()
        if not STATED.search(text):
            raise UsageError(f"{source}: no 'Time: N minutes' in its opening line")
        new = STATED.sub(f"Time: {recorded[stem]['stated_min']} minutes", text, count=1)
        if new != text:
            with open(source, "w", encoding="utf-8") as fh:
                fh.write(new)
            changed.append(source)
    return changed


def table(data: dict, source_dir=None) -> str:
    """The per-exercise minutes as a plain-text table; with ``source_dir``, also the time each source
    states now (before ``--set-times``)."""
    now = sources(source_dir) if source_dir else {}
    head = f"{'exercise':<24}{'read':>6}{'write':>7}{'run':>6}{'debug':>7}{'total':>7}{'stated':>8}"
    rows = [head + (f"{'source now':>12}" if now else "")]
    for stem, row in data["exercises"].items():
        line = (
            f"{stem:<24}{row['read_min']:>6}{row['write_min']:>7}{row['run_min']:>6}"
            f"{row['debug_fix_min']:>7}{row['total_min']:>7}{row['stated_min']:>8}"
        )
        if now:
            line += f"{stated_minutes(now[stem]) if stem in now else '-':>12}"
        rows.append(line)
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=(), help="exercise ids or stems (ex05 ...)")
    parser.add_argument(
        "--counts-only", action="store_true", help="recount read/write, keep the recorded run times"
    )
    parser.add_argument(
        "--set-times",
        action="store_true",
        help="write each source's 'Time: N minutes' from the file (then run make exercises)",
    )
    parser.add_argument(
        "--out", default=TIMES, help="the JSON file (default: book/data/exercise_times.json)"
    )
    args = parser.parse_args(argv)
    if args.set_times:
        changed = set_times(args.out)
        print(
            f"stated times changed in {len(changed)} source(s): {', '.join(map(os.path.basename, changed)) or 'none'}"
        )
        if changed:
            print("now regenerate the notebooks: make exercises")
        return 0
    data = measure(args.only, counts_only=args.counts_only, path=args.out)
    print(f"{args.out}: {data['machine']}, {data['date']}")
    print(table(data, paths.SOURCE_DIR))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
