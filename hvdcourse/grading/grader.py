"""``hvdcourse-grade``: grade a class's exercise notebooks in one command (lesson: instructor guide).

    hvdcourse-grade SUBMISSIONS --out RESULTS [--timeout S] [--jobs N]

SUBMISSIONS holds one folder per student with their notebooks (``alice/ex04_ring_allreduce.ipynb``),
or one notebook per student (``alice.ipynb``). Every notebook runs in its own temporary folder, in a
fresh kernel, with a time limit and an output cap, under the sandbox of :mod:`hvdcourse.grading.audit`
(no reading of the solutions, the exercise sources, the tests or other submissions; no writing outside
its folder; those folders are also hidden in a private mount namespace where ``unshare`` works).
Checks of distributed code run on 2 MPI ranks. Writes ``scores.csv``, ``feedback/<student>.md``,
``summary.md`` and ``results.json`` into RESULTS, printing progress as it goes. A broken submission
gets its own result and never stops the batch.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from hvdcourse.exercises import paths
from hvdcourse.grading import processes
from hvdcourse.grading import report as reporting
from hvdcourse.grading.runner import TOKEN_ENV

GRACE = 60  # seconds the runner gets beyond the notebook's limit to shut the kernel down and report


def discover(root: str) -> list:
    """[(student, [notebook paths])] from a submissions folder, sorted by student."""
    students = {}
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.startswith("."):
            continue
        if os.path.isdir(path):
            found = sorted(os.path.join(d, f) for d, dirs, files in os.walk(path) for f in files
                           if f.endswith(".ipynb") and ".ipynb_checkpoints" not in d)
            students[entry] = found
        elif entry.endswith(".ipynb"):
            students.setdefault(entry[:-len(".ipynb")], []).append(path)
    return sorted(students.items())


def read_problem(path: str) -> str:
    """'' if ``path`` is a valid notebook, else a one-line reason."""
    import nbformat

    try:
        with open(path, encoding="utf-8") as fh:
            json.load(fh)
        nbformat.read(path, as_version=4)
    except json.JSONDecodeError as err:
        return f"not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); re-save it from Jupyter"
    except UnicodeDecodeError:
        return "not a text file; submit the .ipynb saved by Jupyter"
    except Exception as err:  # nbformat's validation errors come in several types
        return f"not a valid notebook ({type(err).__name__}: {str(err).splitlines()[0][:120]})"
    return ""


def notebook_exercises(path: str) -> list:
    """The exercise a generated notebook belongs to ([] if it does not say: detect from its names)."""
    from hvdcourse.exercises.checks import EXERCISES

    try:
        with open(path, encoding="utf-8") as fh:
            ex_id = json.load(fh).get("metadata", {}).get("hvdcourse", {}).get("exercise", "")
    except (OSError, ValueError, AttributeError):
        return []
    return [ex_id] if ex_id in EXERCISES else []


_UNSHARE = None


def can_hide() -> bool:
    """True if a private mount namespace can be made here (root, or unprivileged user namespaces)."""
    global _UNSHARE
    if _UNSHARE is None:
        exe = shutil.which("unshare")
        ok = False
        if exe and os.geteuid() == 0:
            try:
                ok = subprocess.run([exe, "--mount", "--propagation", "private", "true"],
                                    capture_output=True, timeout=20).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
        _UNSHARE = exe if ok else ""
    return bool(_UNSHARE)


def deny_list(submissions: str, out: str, scratch: str) -> list:
    """Folders a submission may not read: solutions, sources, tests, git, submissions, results."""
    candidates = [paths.SOLUTIONS_DIR, paths.SOURCE_DIR, os.path.join(paths.ROOT, "tests"),
                  os.path.join(paths.ROOT, ".git"), submissions, out]
    needed = [os.path.realpath(p) for p in (scratch, paths.ROOT, os.path.dirname(paths.__file__), sys.prefix)]
    deny = []
    for folder in candidates:
        real = os.path.realpath(folder)
        # never deny a folder that holds what the run itself needs (the scratch area, the package, the venv)
        if any(n == real or n.startswith(real.rstrip("/") + "/") for n in needed):
            continue
        deny.append(real)
    return sorted(set(deny))


def grade_notebook(student: str, path: str, args, scratch: str, deny: list, number: int) -> dict:
    """Run one notebook through the runner; always return a report."""
    name = os.path.basename(path)
    problem = read_problem(path)
    if problem:
        return {"name": name, "report": {"status": "unreadable", "problem": f"the file is {problem}", "errors": [],
                                         "results": [], "violations": [], "seconds": 0}}
    sandbox = os.path.join(scratch, f"s{number}")
    private = os.path.join(scratch, f"p{number}")
    os.makedirs(sandbox)
    os.makedirs(private, mode=0o700)
    job = {"notebook": os.path.abspath(path), "sandbox": sandbox, "private": private, "deny": deny,
           "exercises": notebook_exercises(path), "timeout": args.timeout,
           "cell_timeout": args.cell_timeout or args.timeout,
           "output_cap": int(args.output_cap * 1000), "report": os.path.join(private, "report.json"),
           "hide": can_hide() and not args.no_hide}
    with open(os.path.join(private, "job.json"), "w") as fh:
        json.dump(job, fh)
    token = secrets.token_hex(12)
    env = dict(os.environ, **{TOKEN_ENV: token})
    env.pop("HVDCOURSE_SANDBOX", None)
    cmd = [sys.executable, "-m", "hvdcourse.grading.runner", "--job", os.path.join(private, "job.json")]
    if job["hide"]:
        cmd = [_UNSHARE, "--mount", "--propagation", "private", "--"] + cmd
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=private,
                            start_new_session=True)
    try:
        stderr, _ = proc.communicate(timeout=args.timeout + GRACE)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        stderr = b""
    finally:
        processes.kill_tagged(token)  # the kernel, mpirun and ranks, wherever they were re-parented
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    seconds = round(time.monotonic() - start, 1)
    if os.path.isfile(job["report"]):
        with open(job["report"]) as fh:
            report = json.load(fh)
    elif timed_out:
        report = {"status": "timeout", "problem": f"the notebook ran longer than {args.timeout:g} s; its kernel "
                  "and every process it started were killed", "errors": [], "results": [], "violations": []}
    else:
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] if stderr else []
        report = {"status": "grader-error", "problem": f"the runner stopped without a report: {' '.join(tail)[:200]}",
                  "errors": [], "results": [], "violations": []}
    reads = [v for v in report.get("violations", []) if v["kind"] == "read-solutions"]
    if reads:  # whatever else happened, this notebook is not graded
        report["status"] = "violation"
        report["problem"] = (f"it tried to read {reads[0]['path']}; reading the solutions or other graded "
                             "material is not allowed, so this notebook gets no points")
        report["results"] = [reporting.zeroed(r, "not graded: the notebook tried to read the solutions")
                             for r in report.get("results", [])]
    report["seconds"] = seconds
    if not args.keep:
        shutil.rmtree(sandbox, ignore_errors=True)
    return {"name": name, "report": report}


def _outcome_line(report: dict) -> str:
    scores = [(r["exercise"], r["score"], r["max_score"]) for r in report.get("results", [])]
    text = ", ".join(f"{ex} {s:g}/{m:g}" for ex, s, m in scores) or "no exercise graded"
    status = report.get("status", "?")
    return text if status == "ok" else f"{status.upper()}: {text}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="hvdcourse-grade", description="Grade a class's exercise notebooks: every notebook runs in a sandbox "
        "with a time limit; writes scores.csv, feedback/<student>.md, summary.md and results.json.")
    parser.add_argument("submissions", help="folder with one folder (or one .ipynb) per student")
    parser.add_argument("--out", required=True, help="folder for scores.csv, feedback/, summary.md")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per notebook (default 600)")
    parser.add_argument("--cell-timeout", type=float, default=None,
                        help="seconds per student cell (default: the notebook's limit); the checks get the rest")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1; each "
                        "distributed check uses 2 cores)")
    parser.add_argument("--output-cap", type=float, default=2000, help="kB of output per notebook (default 2000)")
    parser.add_argument("--no-hide", action="store_true",
                        help="do not hide the denied folders in a mount namespace (the audit hook still denies)")
    parser.add_argument("--keep", action="store_true", help="keep each notebook's sandbox folder (debugging)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.submissions):
        parser.error(f"{args.submissions!r} is not a folder; give the folder of the students' notebooks")
    if args.timeout <= 0 or args.jobs < 1:
        parser.error("--timeout must be > 0 and --jobs >= 1")
    from hvdcourse.exercises.checks import EXERCISES

    students = discover(args.submissions)
    if not students:
        print(f"error: no notebooks found in {args.submissions}", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="hvdg-")
    deny = deny_list(args.submissions, args.out, scratch)
    tasks = [(s, p) for s, nbs in students for p in nbs]
    print(f"grading {len(tasks)} notebook(s) of {len(students)} student(s), {args.jobs} at a time, "
          f"{args.timeout:g} s each at most; sandbox: audit hook"
          + (" + hidden folders (mount namespace)" if can_hide() and not args.no_hide else ""), flush=True)
    done, lock, start = [0], threading.Lock(), time.monotonic()

    def work(item):
        number, (student, path) = item
        outcome = grade_notebook(student, path, args, scratch, deny, number)
        with lock:
            done[0] += 1
            print(f"[{done[0]}/{len(tasks)}] {student}/{outcome['name']}: {_outcome_line(outcome['report'])} "
                  f"({outcome['report'].get('seconds', 0):.0f} s)", flush=True)
        return student, outcome

    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            outcomes = list(pool.map(work, enumerate(tasks)))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    by_student = {s: {"name": s, "notebooks": []} for s, _ in students}
    for student, outcome in outcomes:
        by_student[student]["notebooks"].append(outcome)
    exercises = {e.id: e.title for e in EXERCISES.values()}
    written = reporting.write_all(args.out, list(by_student.values()), exercises, time.monotonic() - start)
    print(f"wrote {written['csv']}, {written['summary']} and {len(by_student)} feedback file(s) in "
          f"{written['feedback']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
