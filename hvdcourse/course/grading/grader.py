"""``hvdcourse-grade``: grade a class's exercise notebooks in one command (lesson: Instructor guide).

    hvdcourse-grade SUBMISSIONS --out RESULTS [--timeout S] [--jobs N|auto] [--mem-mb M] [--slurm]

SUBMISSIONS holds one folder per student with their notebooks (``alice/ex04_ring_allreduce.ipynb``),
or one notebook per student (``alice.ipynb``). Every notebook runs in its own temporary folder, in a
fresh course kernel, with a time limit, an output cap and limits on memory, processes and CPU time,
under the sandbox of :mod:`hvdcourse.course.grading.audit` (no reading of the solutions, the exercise
sources, the tests or other submissions; no writing outside its folder). When the grader runs as
root, those folders are also hidden in a private mount namespace (``unshare``) and every notebook runs
as a user of its own; when it does not, the notebook's processes run under bubblewrap
(:mod:`hvdcourse.course.grading.bwrap`: the system and the course read-only, no home folders, a
private /tmp, no network, those folders hidden). Where neither can be had, the grader refuses to run
unless told ``--unsafe-no-sandbox``. The checks never run where the student's code runs: the runner
(:mod:`hvdcourse.course.grading.runner`) records what the student's functions return as data, and the
judge (:mod:`hvdcourse.course.grading.judge`), a fresh process loaded from the course's own files, decides
the points. Checks of distributed code run on 2 MPI ranks. Writes ``scores.csv``,
``feedback/<student>.md``, ``summary.md`` and ``results.json`` into RESULTS, with a progress bar.
A broken submission gets its own result and never stops the batch.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from hvdcourse.runtime import machine
from hvdcourse.course.exercises import paths
from hvdcourse.course.grading.common import GRACE, Stages, progress_line
from hvdcourse.course.grading import bwrap, processes
from hvdcourse.course.grading import report as reporting
from hvdcourse.course.grading.runner import TOKEN_ENV, skip_slow_schema_formats
from hvdcourse.runtime.errors import UsageError, run_cli
from hvdcourse.runtime.paths import ROOT  # the folder that holds the package

# the first sandbox user (one per notebook graded at once), when the grader runs as root
SANDBOX_UID = 61000
DEFAULT_LIMITS = {"mem_mb": 6144, "nproc": 512, "cpu": 900}
ACTIVE, ACTIVE_UIDS = set(), set()  # tokens and sandbox users of the notebooks being graded now


def discover(root: str) -> list:
    """[(student, [notebook paths])] from a submissions folder, sorted by student."""
    students = {}
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.startswith("."):
            continue
        if os.path.isdir(path):
            found = sorted(
                os.path.join(d, f)
                for d, dirs, files in os.walk(path)
                for f in files
                if f.endswith(".ipynb") and ".ipynb_checkpoints" not in d
            )
            students[entry] = found
        elif entry.endswith(".ipynb"):
            students.setdefault(entry[: -len(".ipynb")], []).append(path)
    return sorted(students.items())


def read_problem(path: str) -> str:
    """'' if ``path`` is a notebook the grader can run (format 3 is converted), else a one-line reason."""
    skip_slow_schema_formats()  # (the first validation paid it: 1.3 s quiet, 7 s beside the book build)
    import nbformat

    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
        nb = nbformat.reads(json.dumps(raw), as_version=4)
        nbformat.validate(nb)
    except json.JSONDecodeError as err:
        return f"not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}); re-save it from Jupyter"
    except UnicodeDecodeError:
        return "not a text file; submit the .ipynb saved by Jupyter"
    except Exception as err:  # nbformat's validation errors come in several types
        return f"not a valid notebook ({type(err).__name__}: {str(err).splitlines()[0][:120]})"
    return ""


def notebook_exercises(path: str) -> list:
    """The exercise a generated notebook belongs to ([] if it does not say: detect from its names)."""
    from hvdcourse.course.exercises.checks import EXERCISES

    try:
        with open(path, encoding="utf-8") as fh:
            ex_id = json.load(fh).get("metadata", {}).get("hvdcourse", {}).get("exercise", "")
    except (OSError, ValueError, AttributeError, TypeError):
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
                ok = (
                    subprocess.run(
                        [exe, "--mount", "--propagation", "private", "true"],
                        capture_output=True,
                        timeout=20,
                    ).returncode
                    == 0
                )
            except (OSError, subprocess.SubprocessError):
                ok = False
        _UNSHARE = exe if ok else ""
    return bool(_UNSHARE)


def deny_list(submissions: str, out: str, scratch: str, extra=()) -> list:
    """Folders a submission may not read: solutions, sources, tests, git, submissions, results, and
    the ``extra`` ones (``--deny``)."""
    candidates = [
        paths.SOLUTIONS_DIR,
        paths.SOURCE_DIR,
        os.path.join(paths.ROOT, "tests"),
        os.path.join(paths.ROOT, ".git"),
        submissions,
        out,
        *extra,
    ]
    needed = [
        os.path.realpath(p)
        for p in (scratch, paths.ROOT, os.path.dirname(paths.__file__), sys.prefix)
    ]
    deny = []
    for folder in candidates:
        real = os.path.realpath(folder)
        # never deny a folder that holds what the run itself needs (the scratch area, the package, the venv)
        if any(n == real or n.startswith(real.rstrip("/") + "/") for n in needed):
            continue
        deny.append(real)
    return sorted(set(deny))


def limits_of(args) -> dict:
    return {"mem_mb": args.mem_mb, "nproc": args.nproc, "cpu": args.cpu}


def judge(report: dict, timeout: float = 120) -> tuple:
    """The points, decided by a fresh process loaded from the course's own folder (see judge.py),
    and the judge's CPU seconds."""
    job = {
        "exercises": report.get("exercises", []),
        "static": report.get("static", {}),
        "answers": report.get("answers"),
    }
    boot = f"import sys; sys.path.insert(0, {ROOT!r}); from hvdcourse.course.grading.judge import main; sys.exit(main())"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": tempfile.gettempdir(),
    }
    run = subprocess.run(
        [sys.executable, "-I", "-c", boot],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if run.returncode != 0:
        raise RuntimeError(
            f"the judge failed: {(run.stderr.strip().splitlines() or ['?'])[-1][:300]}"
        )
    decided = json.loads(run.stdout)
    return decided["results"], decided.get("cpu", 0.0)


def grade_notebook(
    student: str, path: str, args, scratch: str, deny: list, number: int, uid=None
) -> dict:
    """Run one notebook through the runner, then the judge; always return a report (its ``timing``:
    the wall seconds of each stage, see :class:`~hvdcourse.course.grading.common.Stages`)."""
    name = os.path.basename(path)
    start, stages = time.monotonic(), Stages()
    problem = read_problem(path)
    stages.lap("read")
    if problem:
        return {
            "name": name,
            "report": {
                "status": "unreadable",
                "problem": f"the file is {problem}",
                "errors": [],
                "results": [],
                "violations": [],
                "seconds": 0,
            },
        }
    sandbox = os.path.join(scratch, f"s{number}")
    private = os.path.join(scratch, f"p{number}")
    os.makedirs(sandbox, mode=0o700)
    os.makedirs(private, mode=0o700)
    job = {
        "notebook": os.path.abspath(path),
        "sandbox": sandbox,
        "private": private,
        "deny": deny,
        "site": os.path.join(scratch, f"site{number}"),
        "answers_dir": os.path.join(scratch, f"a{number}"),
        "root": ROOT,
        "uid": uid,
        "limits": limits_of(args),
        "exercises": notebook_exercises(path),
        "timeout": args.timeout,
        "check_timeout": args.timeout,
        "cell_timeout": args.cell_timeout or args.timeout,
        "output_cap": int(args.output_cap * 1000),
        "report": os.path.join(private, "report.json"),
        "hide": can_hide() and not args.no_hide,
        "bwrap": getattr(args, "bwrap", None),
        "rank_locks": getattr(args, "rank_locks", []),
    }
    job["started"] = time.time()  # the runner times its start from here
    stages.lap("setup", job["started"])
    with open(os.path.join(private, "job.json"), "w") as fh:
        json.dump(job, fh)
    token = secrets.token_hex(12)
    ACTIVE.add(token)
    env = dict(os.environ, **{TOKEN_ENV: token})
    env.pop("HVDCOURSE_SANDBOX", None)
    cmd = [
        sys.executable,
        "-m",
        "hvdcourse.course.grading.runner",
        "--job",
        os.path.join(private, "job.json"),
    ]
    if job["hide"]:
        cmd = [_UNSHARE, "--mount", "--propagation", "private", "--"] + cmd
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=private,
        start_new_session=True,
    )
    try:
        stderr, _ = proc.communicate(timeout=2 * args.timeout + GRACE)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        stderr = b""
    finally:
        ended = time.time()
        processes.kill_user(uid)
        processes.kill_tagged(token)  # the kernel, mpirun and ranks, wherever they were re-parented
        ACTIVE.discard(token)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    if os.path.isfile(job["report"]):
        with open(job["report"]) as fh:
            report = json.load(fh)
    elif timed_out:
        report = {
            "status": "timeout",
            "problem": f"the notebook ran longer than {args.timeout:g} s; its kernel "
            "and every process it started were killed",
            "errors": [],
            "results": [],
            "violations": [],
        }
    else:
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] if stderr else []
        report = {
            "status": "grader-error",
            "problem": f"the runner stopped without a report: {' '.join(tail)[:200]}",
            "errors": [],
            "results": [],
            "violations": [],
        }
    runner = report.pop("timing", None)  # the runner's stages, between the grader's
    if isinstance(runner, dict) and all(isinstance(v, (int, float)) for v in runner.values()):
        stages.seconds.update(runner)
        stages.last = min(ended, job["started"] + sum(runner.values()))
        stages.lap("runner_exit", ended)
    else:
        stages.lap("runner", ended)
    stages.lap("cleanup")
    if report.get("exercises"):
        try:
            report["results"], report.setdefault("cpu", {})["judge"] = judge(report)
        except (RuntimeError, ValueError, OSError, subprocess.SubprocessError) as err:
            report["status"], report["problem"] = "grader-error", f"{err}"[:300]
    report.pop("answers", None)  # the raw answer data: judged, not kept
    reads = [v for v in report.get("violations", []) if v["kind"] == "read-solutions"]
    if reads:  # whatever else happened, this notebook is not graded
        report["status"] = "violation"
        report["problem"] = (
            f"it tried to read {reads[0]['path']}; reading the solutions or other graded "
            "material is not allowed, so this notebook gets no points"
        )
        report["results"] = [
            reporting.zeroed(r, "not graded: the notebook tried to read the solutions")
            for r in report.get("results", [])
        ]
    stages.lap("judge")
    report["seconds"] = round(time.monotonic() - start, 1)
    report["timing"] = stages.seconds
    if not args.keep:
        for folder in (sandbox, job["answers_dir"], job["site"]):
            shutil.rmtree(folder, ignore_errors=True)
    return {"name": name, "report": report}


def stop_active(signum=None, frame=None) -> None:
    """Kill every process of the notebooks being graded now and exit (SIGTERM of a cancelled Slurm task)."""
    for token in list(ACTIVE):
        processes.kill_tagged(token)
    for uid in list(ACTIVE_UIDS):
        processes.kill_user(uid)
    os._exit(128 + (signum or 15))


def _outcome_line(report: dict) -> str:
    scores = [(r["exercise"], r["score"], r["max_score"]) for r in report.get("results", [])]
    text = ", ".join(f"{ex} {s:g}/{m:g}" for ex, s, m in scores) or "no exercise graded"
    status = report.get("status", "?")
    return text if status == "ok" else f"{status.upper()}: {text}"


def free_uids(count: int) -> int:
    """The first of ``count`` sandbox user ids that no process uses now (two graders never share one)."""
    import random

    while True:
        base = SANDBOX_UID + 64 * random.randrange(0, 1000)
        if not any(processes.owned_by(base + i) for i in range(count)):
            return base


def jobs_auto(cores: int | None = None) -> tuple:
    """(notebooks at once, rank checks at once) for ``cores`` cores: every core runs a notebook, and the
    2-rank checks, which use 2 cores each, take turns so that they never share a core."""
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, cores), max(1, cores // 2)


def add_options(parser) -> None:
    """The grading options, shared by the local and the Slurm modes."""
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds per notebook (default 600)"
    )
    parser.add_argument(
        "--cell-timeout",
        type=float,
        default=None,
        help="seconds per student cell (default: the notebook's limit); the checks get the rest",
    )
    parser.add_argument(
        "--output-cap", type=float, default=2000, help="kB of output per notebook (default 2000)"
    )
    parser.add_argument(
        "--mem-mb",
        type=int,
        default=DEFAULT_LIMITS["mem_mb"],
        help=f"address space per process, MB (default {DEFAULT_LIMITS['mem_mb']}: TensorFlow with "
        "MPI maps about 3 GB; 0 = no limit)",
    )
    parser.add_argument(
        "--nproc",
        type=int,
        default=DEFAULT_LIMITS["nproc"],
        help=f"processes and threads of the sandbox user, or of the bubblewrap sandbox when the "
        f"grader is not root (default {DEFAULT_LIMITS['nproc']})",
    )
    parser.add_argument(
        "--cpu",
        type=int,
        default=DEFAULT_LIMITS["cpu"],
        help=f"CPU seconds per process (default {DEFAULT_LIMITS['cpu']})",
    )
    parser.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="FOLDER",
        help="another folder the notebooks may not read, hidden like the solutions (repeat; "
        "hvdcourse-class passes its course folder, where the other learners' notebooks are)",
    )
    parser.add_argument(
        "--no-hide",
        action="store_true",
        help="do not hide the denied folders (mount namespace, or bubblewrap when not root); the "
        "audit hook still denies",
    )
    parser.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="grade even where the notebooks cannot be confined (not root, and no bubblewrap that "
        "works): they then run as your own user, under the audit hook alone",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep each notebook's sandbox folder (debugging)"
    )


def grade_class(argv=None) -> int:
    """Grade a class from the command line ``argv``; raises :class:`~hvdcourse.runtime.errors.UsageError` on bad input."""
    parser = argparse.ArgumentParser(
        prog="hvdcourse-grade",
        description="Grade a class's exercise notebooks: every notebook runs in a sandbox "
        "with time, memory, process and CPU limits; writes scores.csv, feedback/<student>.md, summary.md and "
        "results.json.",
    )
    parser.add_argument("submissions", help="folder with one folder (or one .ipynb) per student")
    parser.add_argument("--out", required=True, help="folder for scores.csv, feedback/, summary.md")
    parser.add_argument(
        "--jobs",
        default="1",
        help="notebooks graded at once, or 'auto' (one per core; the "
        "2-rank checks take turns so they never share a core); default 1",
    )
    add_options(parser)
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="grade on Slurm: one array task per student (or per notebook), each with these "
        "limits; waits for the tasks and writes the same files as a local run",
    )
    parser.add_argument(
        "--slurm-per",
        choices=("student", "notebook"),
        default="student",
        help="what one array task grades (default: student)",
    )
    parser.add_argument(
        "--slurm-wait",
        type=float,
        default=None,
        help="seconds to wait for the whole array before it is cancelled (default: every "
        "notebook's time limit, one after the other)",
    )
    parser.add_argument(
        "--slurm-dir",
        default=None,
        help="shared folder for the array's tasks, logs and results (default: OUT/slurm); the "
        "compute nodes must see it, the submissions and the course at the same paths",
    )
    parser.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="an sbatch option for the array, e.g. --sbatch=--partition=short "
        "--sbatch=--cpus-per-task=2 (repeat for several)",
    )
    parser.add_argument(
        "--record",
        default=None,
        metavar="JSON",
        help="add this run's timings (machine, load average, seconds per notebook) to a JSON "
        "file such as book/data/grading_throughput.json",
    )
    args = parser.parse_args(argv)
    if not os.path.isdir(args.submissions):
        raise UsageError(
            f"{args.submissions!r} is not a folder; give the folder of the students' notebooks"
        )
    args.jobs_option, args.load_before, args.cpu_before = args.jobs, os.getloadavg(), cpu_seconds()
    if args.jobs == "auto":
        args.jobs, rank_slots = jobs_auto()
    else:
        try:
            args.jobs = int(args.jobs)
        except ValueError:
            parser.error(f"--jobs must be a number or 'auto', not {args.jobs!r}")
        rank_slots = args.jobs
    if args.timeout <= 0 or args.jobs < 1:
        parser.error("--timeout must be > 0 and --jobs >= 1")
    students = discover(args.submissions)
    if not students:
        raise UsageError(
            f"no notebooks found in {args.submissions}: it should hold one folder per student "
            "with their .ipynb files"
        )
    os.makedirs(args.out, exist_ok=True)
    start = time.monotonic()
    if args.slurm:
        from hvdcourse.course.grading import slurm

        outcomes = slurm.grade(args, students)
    else:
        outcomes = grade_local(args, students, rank_slots)
    if args.record:
        record_throughput(args, students, outcomes, time.monotonic() - start)
    return write_results(args.out, students, outcomes, time.monotonic() - start)


NO_SANDBOX = (
    "no sandbox for the notebooks here: {why}. Install bubblewrap (sudo apt-get install bubblewrap; "
    "it needs user namespaces), or grade as root; --unsafe-no-sandbox runs them unconfined, as {who}"
)


def sandbox_of(args):
    """How the notebooks are confined besides the audit hook: 'root' (a user per notebook in a mount
    namespace), 'bwrap' (bubblewrap, for a grader that is not root) or 'none' (only with --no-hide or
    --unsafe-no-sandbox); raises :class:`~hvdcourse.runtime.errors.UsageError` where none can be had."""
    if os.geteuid() == 0:
        if args.no_hide or can_hide():
            return "root" if can_hide() and not args.no_hide else "none"
        why, who = "the grader is root but cannot make a mount namespace (unshare)", "root"
    else:
        if bwrap.available():
            return "bwrap"
        why = "the grader is not root and bubblewrap (bwrap) " + (
            "cannot make its namespaces" if shutil.which("bwrap") else "is not installed"
        )
        who = "your own user"
    if getattr(args, "unsafe_no_sandbox", False):
        print(f"warning: {why}; the notebooks run unconfined (--unsafe-no-sandbox)", flush=True)
        return "none"
    raise UsageError(NO_SANDBOX.format(why=why, who=who))


def grade_local(args, students: list, rank_slots: int) -> list:
    """[(student, outcome)] for every notebook of ``students``, ``args.jobs`` at a time on this machine."""
    mode = sandbox_of(args)
    args.bwrap = {"exe": bwrap.available(), "hide": not args.no_hide} if mode == "bwrap" else None
    scratch = tempfile.mkdtemp(prefix="hvdg-")
    os.chmod(scratch, 0o711)  # the sandbox users may enter their own folder, not list the others
    deny = deny_list(args.submissions, args.out, scratch, getattr(args, "deny", None) or ())
    tasks = [(s, p) for s, nbs in students for p in nbs]
    # a user per notebook needs the namespace
    root = mode == "root"
    users = queue.Queue()
    base = free_uids(args.jobs) if root else None
    for slot in range(args.jobs):
        users.put(base + slot if root else None)
        if root:
            ACTIVE_UIDS.add(base + slot)
    args.rank_locks = [os.path.join(scratch, f"ranks{i}.lock") for i in range(rank_slots)]
    print(
        f"grading {len(tasks)} notebook(s) of {len(students)} student(s), {args.jobs} at a time "
        f"({rank_slots} rank check(s) at a time), {args.timeout:g} s each at most; limits: {args.mem_mb} MB, "
        f"{args.nproc} processes, {args.cpu} CPU s; sandbox: audit hook"
        + {
            "root": " + hidden folders (mount namespace) + a user per notebook",
            "bwrap": " + bubblewrap (system and course read-only, no home folders, private /tmp, "
            + ("hidden folders, " if not args.no_hide else "")
            + "no network; same user as the grader)",
            "none": " (same user as the grader, nothing hidden)",
        }[mode],
        flush=True,
    )
    done, lock, start = [0], threading.Lock(), time.monotonic()

    def work(item):
        number, (student, path) = item
        uid = users.get()
        try:
            outcome = grade_notebook(student, path, args, scratch, deny, number, uid)
        finally:
            users.put(uid)
        with lock:
            done[0] += 1
            print(
                f"[{done[0]}/{len(tasks)}] {student}/{outcome['name']}: {_outcome_line(outcome['report'])} "
                f"({outcome['report'].get('seconds', 0):.0f} s)  "
                f"{progress_line(done[0], len(tasks), time.monotonic() - start)}",
                flush=True,
            )
        return student, outcome

    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            return list(pool.map(work, enumerate(tasks)))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


def cpu_seconds() -> float:
    """CPU time (user + system) of this grader and of every process it started that has ended."""
    import resource

    return sum(
        u.ru_utime + u.ru_stime
        for u in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
    )


def record_throughput(args, students: list, outcomes: list, seconds: float) -> None:
    """Add this run's timings to the JSON file ``args.record`` (one entry per mode and --jobs, replaced
    by a newer run): machine, load average before and after, wall time, seconds per notebook."""
    import datetime

    per_notebook = {f"{s}/{o['name']}": o["report"].get("seconds", 0) for s, o in outcomes}
    entry = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {
            "cpu": machine.cpu_model(),
            "cores": len(os.sched_getaffinity(0)),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        },
        "load_average_before": [round(x, 2) for x in args.load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "mode": "slurm" if args.slurm else "local",
        "jobs": args.jobs_option,
        "jobs_used": args.jobs,
        "students": len(students),
        "notebooks": len(outcomes),
        "wall_seconds": round(seconds, 1),
        "cpu_seconds": round(cpu_seconds() - args.cpu_before, 1),
        "notebook_seconds": per_notebook,
        # CPU seconds of each notebook's three processes: the learner's cells in the kernel, the answer
        # run (the checks observing the learner's functions, with their ranks) and the judge
        "notebook_cpu_seconds": {
            f"{s}/{o['name']}": o["report"].get("cpu", {}) for s, o in outcomes
        },
        # wall seconds of each notebook's stages, from its start to its report (grade_notebook)
        "notebook_stage_seconds": {
            f"{s}/{o['name']}": o["report"].get("timing", {}) for s, o in outcomes
        },
        "statuses": sorted({o["report"].get("status", "?") for _, o in outcomes}),
        "points": sum(
            r.get("score", 0) for _, o in outcomes for r in o["report"].get("results", [])
        ),
        "max_points": sum(
            r.get("max_score", 0) for _, o in outcomes for r in o["report"].get("results", [])
        ),
    }
    data = {"runs": []}
    if os.path.isfile(args.record):
        with open(args.record) as fh:
            data = json.load(fh)
    data["runs"] = [
        r for r in data.get("runs", []) if (r["mode"], r["jobs"]) != (entry["mode"], entry["jobs"])
    ]
    data["runs"].append(entry)
    with open(args.record, "w") as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")
    print(f"recorded the timings in {args.record}", flush=True)


def write_results(out: str, students: list, outcomes: list, seconds: float) -> int:
    from hvdcourse.course.exercises.checks import EXERCISES

    by_student = {s: {"name": s, "notebooks": []} for s, _ in students}
    for student, outcome in outcomes:
        by_student[student]["notebooks"].append(outcome)
    exercises = {e.id: e.title for e in EXERCISES.values()}
    written = reporting.write_all(out, list(by_student.values()), exercises, seconds)
    print(
        f"wrote {written['csv']}, {written['summary']} and {len(by_student)} feedback file(s) in "
        f"{written['feedback']}",
        flush=True,
    )
    return 0


def main(argv=None) -> int:
    """The ``hvdcourse-grade`` command: :func:`grade_class` with the course's one-line errors and exit codes."""
    return run_cli(grade_class, argv)


if __name__ == "__main__":
    sys.exit(main())
