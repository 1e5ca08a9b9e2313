"""Grade notebooks on this machine, ``jobs`` at a time (lesson: Instructor guide).

Each notebook goes through :data:`STAGES`, in order: the grader reads it, sets up its folders and
job, starts the runner (:mod:`hvdcourse.course.grading.runner`, the notebook run and the answer run,
in the sandbox) and cleans up after it, has the judge (:mod:`hvdcourse.course.grading.judge`)
decide the points, and takes the points away from a notebook that tried to read the solutions.
A stage that ends the notebook's grading (an unreadable file) leaves its report and the rest are
skipped. Every stage's wall time goes into the report's ``timing``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from hvdcourse.course.exercises import paths
from hvdcourse.course.grading import bwrap, processes
from hvdcourse.course.grading import report as reporting
from hvdcourse.course.grading.job import Job, Report, Stages, Status, failed
from hvdcourse.course.grading.options import Options
from hvdcourse.course.grading.runner import skip_slow_schema_formats
from hvdcourse.runtime.errors import UsageError
from hvdcourse.runtime.paths import ROOT  # the folder that holds the package

# the first sandbox user (one per notebook graded at once), when the grader runs as root
SANDBOX_UID = 61000
ACTIVE, ACTIVE_UIDS = set(), set()  # tokens and sandbox users of the notebooks being graded now


# ------------------------------------------------------------------ where and how notebooks run
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


NO_SANDBOX = (
    "no sandbox for the notebooks here: {why}. Install bubblewrap (sudo apt-get install bubblewrap; "
    "it needs user namespaces), or grade as root; --unsafe-no-sandbox runs them unconfined, as {who}"
)


def sandbox_of(options) -> str:
    """How the notebooks are confined besides the audit hook: 'root' (a user per notebook in a mount
    namespace), 'bwrap' (bubblewrap, for a grader that is not root) or 'none' (only with --no-hide or
    --unsafe-no-sandbox); raises :class:`~hvdcourse.runtime.errors.UsageError` where none can be had."""
    if os.geteuid() == 0:
        if options.no_hide or can_hide():
            return "root" if can_hide() and not options.no_hide else "none"
        why, who = "the grader is root but cannot make a mount namespace (unshare)", "root"
    else:
        if bwrap.available():
            return "bwrap"
        why = "the grader is not root and bubblewrap (bwrap) " + (
            "cannot make its namespaces" if shutil.which("bwrap") else "is not installed"
        )
        who = "your own user"
    if getattr(options, "unsafe_no_sandbox", False):
        print(f"warning: {why}; the notebooks run unconfined (--unsafe-no-sandbox)", flush=True)
        return "none"
    raise UsageError(NO_SANDBOX.format(why=why, who=who))


def free_uids(count: int) -> int:
    """The first of ``count`` sandbox user ids that no process uses now (two graders never share one)."""
    while True:
        base = SANDBOX_UID + 64 * random.randrange(0, 1000)
        if not any(processes.owned_by(base + i) for i in range(count)):
            return base


@dataclasses.dataclass(frozen=True)
class Place:
    """Where this grader's notebooks run: its scratch folder, what they may not read, and how they
    are confined (``bwrap``: bubblewrap's settings, for a grader that is not root)."""

    scratch: str
    deny: list
    bwrap: dict | None
    rank_locks: list


# ------------------------------------------------------------------ one notebook, stage by stage
@dataclasses.dataclass
class Notebook:
    """One notebook on its way through :data:`STAGES`."""

    student: str
    path: str
    number: int  # its folders in the scratch area
    uid: int | None  # its sandbox user (a root grader)
    options: Options
    place: Place
    stages: Stages = dataclasses.field(default_factory=Stages)
    start: float = dataclasses.field(default_factory=time.monotonic)
    report: Report | None = None
    job: Job | None = None
    done: bool = False  # a stage decided the report: skip the rest

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def folder(self, kind: str) -> str:
        return os.path.join(self.place.scratch, f"{kind}{self.number}")


def read(nb: Notebook) -> None:
    """An unreadable file gets its report now."""
    problem = read_problem(nb.path)
    nb.stages.lap("read")
    if problem:
        nb.report = failed(Status.UNREADABLE, f"the file is {problem}", seconds=0)
        nb.done = True


def set_up(nb: Notebook) -> None:
    """The notebook's folders and the runner's job."""
    sandbox, private = nb.folder("s"), nb.folder("p")
    os.makedirs(sandbox, mode=0o700)
    os.makedirs(private, mode=0o700)
    options = nb.options
    nb.job = Job(
        notebook=os.path.abspath(nb.path),
        sandbox=sandbox,
        private=private,
        deny=nb.place.deny,
        site=nb.folder("site"),
        answers_dir=nb.folder("a"),
        root=ROOT,
        uid=nb.uid,
        limits=options.limits,
        exercises=notebook_exercises(nb.path),
        timeout=options.timeout,
        check_timeout=options.timeout,
        cell_timeout=options.cell_timeout or options.timeout,
        output_cap=int(options.output_cap * 1000),
        report=os.path.join(private, "report.json"),
        hide=can_hide() and not options.no_hide,
        bwrap=nb.place.bwrap,
        rank_locks=nb.place.rank_locks,
        started=time.time(),  # the runner times its start from here
    )
    nb.stages.lap("setup", nb.job.started)
    nb.job.write(os.path.join(private, "job.json"))


def run(nb: Notebook) -> None:
    """The runner, in its own session (and mount namespace); then every process it left is killed."""
    job, token = nb.job, secrets.token_hex(12)
    ACTIVE.add(token)
    env = dict(os.environ, **{processes.TOKEN: token})
    env.pop("HVDCOURSE_SANDBOX", None)
    cmd = [
        sys.executable,
        "-m",
        "hvdcourse.course.grading.runner",
        "--job",
        os.path.join(job.private, "job.json"),
    ]
    if job.hide:
        cmd = [_UNSHARE, "--mount", "--propagation", "private", "--"] + cmd
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=job.private,
        start_new_session=True,
    )
    try:
        stderr, _ = proc.communicate(timeout=nb.options.notebook_budget)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
        stderr = b""
    finally:
        ended = time.time()
        processes.kill_user(nb.uid)
        processes.kill_tagged(token)  # the kernel, mpirun and ranks, wherever they were re-parented
        ACTIVE.discard(token)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    if os.path.isfile(job.report):
        with open(job.report) as fh:
            nb.report = json.load(fh)
    elif timed_out:
        nb.report = failed(
            Status.TIMEOUT,
            f"the notebook ran longer than {nb.options.timeout:g} s; its kernel "
            "and every process it started were killed",
        )
    else:
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] if stderr else []
        nb.report = failed(
            Status.GRADER_ERROR, f"the runner stopped without a report: {' '.join(tail)[:200]}"
        )
    runner = nb.report.pop("timing", None)  # the runner's stages, between the grader's
    if isinstance(runner, dict) and all(isinstance(v, (int, float)) for v in runner.values()):
        nb.stages.seconds.update(runner)
        nb.stages.last = min(ended, job.started + sum(runner.values()))
        nb.stages.lap("runner_exit", ended)
    else:
        nb.stages.lap("runner", ended)
    nb.stages.lap("cleanup")


def judge(nb: Notebook) -> None:
    """The points, decided by a fresh process loaded from the course's own folder (see judge.py)."""
    report = nb.report
    if report.get("exercises"):
        try:
            report["results"], report.setdefault("cpu", {})["judge"] = run_judge(report)
        except (RuntimeError, ValueError, OSError, subprocess.SubprocessError) as err:
            report["status"], report["problem"] = Status.GRADER_ERROR, f"{err}"[:300]
    report.pop("answers", None)  # the raw answer data: judged, not kept


def forfeit(nb: Notebook) -> None:
    """A notebook that tried to read the solutions gets no points, whatever else happened."""
    report = nb.report
    reads = [v for v in report.get("violations", []) if v["kind"] == "read-solutions"]
    if reads:
        report["status"] = Status.VIOLATION
        report["problem"] = (
            f"it tried to read {reads[0]['path']}; reading the solutions or other graded "
            "material is not allowed, so this notebook gets no points"
        )
        report["results"] = [
            reporting.zeroed(r, "not graded: the notebook tried to read the solutions")
            for r in report.get("results", [])
        ]
    nb.stages.lap("judge")


# a notebook's way through the grader, in order
STAGES = (read, set_up, run, judge, forfeit)


def grade_notebook(nb: Notebook) -> dict:
    """Run ``nb`` through :data:`STAGES`; always return ``{"name", "report"}`` (its ``timing``: the
    wall seconds of each stage, see :class:`~hvdcourse.course.grading.job.Stages`)."""
    for stage in STAGES:
        stage(nb)
        if nb.done:
            return {"name": nb.name, "report": nb.report}
    nb.report["seconds"] = round(time.monotonic() - nb.start, 1)
    nb.report["timing"] = nb.stages.seconds
    if not nb.options.keep:
        for folder in (nb.job.sandbox, nb.job.answers_dir, nb.job.site):
            shutil.rmtree(folder, ignore_errors=True)
    return {"name": nb.name, "report": nb.report}


def run_judge(report: dict, timeout: float = 120) -> tuple:
    """The judge's results and its CPU seconds, from a fresh process loaded from the course's folder."""
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


def stop_active(signum=None, frame=None) -> None:
    """Kill every process of the notebooks being graded now and exit (SIGTERM of a cancelled Slurm task)."""
    for token in list(ACTIVE):
        processes.kill_tagged(token)
    for uid in list(ACTIVE_UIDS):
        processes.kill_user(uid)
    os._exit(128 + (signum or 15))


# ------------------------------------------------------------------ a class, jobs at a time
def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_line(done: int, total: int, elapsed: float, width: int = 20) -> str:
    """``[########------------] 8/20, 1m10s elapsed, about 1m45s left`` (the estimate from the mean so far)."""
    filled = int(width * done / total) if total else width
    left = elapsed / done * (total - done) if done else 0
    return (
        f"[{'#' * filled}{'-' * (width - filled)}] {done}/{total}, {_duration(elapsed)} elapsed"
        + (f", about {_duration(left)} left" if done < total else "")
    )


def outcome_line(report: dict) -> str:
    """``ex04 3/4, ex05 5/5``, or ``TIMEOUT: ...`` for a notebook whose status is not ok."""
    scores = [(r["exercise"], r["score"], r["max_score"]) for r in report.get("results", [])]
    text = ", ".join(f"{ex} {s:g}/{m:g}" for ex, s, m in scores) or "no exercise graded"
    status = report.get("status", "?")
    return text if status == Status.OK else f"{status.upper()}: {text}"


SANDBOX_WORDS = {
    "root": " + hidden folders (mount namespace) + a user per notebook",
    "bwrap": " + bubblewrap (system and course read-only, no home folders, private /tmp, "
    "{hidden}no network; same user as the grader)",
    "none": " (same user as the grader, nothing hidden)",
}


def grade_local(options: Options, submissions: str, out: str, students: list) -> list:
    """[(student, outcome)] for every notebook of ``students``, ``options.jobs`` at a time here."""
    mode = sandbox_of(options)
    scratch = tempfile.mkdtemp(prefix="hvdg-")
    os.chmod(scratch, 0o711)  # the sandbox users may enter their own folder, not list the others
    place = Place(
        scratch=scratch,
        deny=deny_list(submissions, out, scratch, options.deny),
        bwrap={"exe": bwrap.available(), "hide": not options.no_hide} if mode == "bwrap" else None,
        rank_locks=[os.path.join(scratch, f"ranks{i}.lock") for i in range(options.rank_slots)],
    )
    tasks = [(s, p) for s, nbs in students for p in nbs]
    # a user per notebook needs the namespace
    root = mode == "root"
    users = queue.Queue()
    base = free_uids(options.jobs) if root else None
    for slot in range(options.jobs):
        users.put(base + slot if root else None)
        if root:
            ACTIVE_UIDS.add(base + slot)
    print(
        f"grading {len(tasks)} notebook(s) of {len(students)} student(s), {options.jobs} at a time "
        f"({options.rank_slots} rank check(s) at a time), {options.timeout:g} s each at most; "
        f"limits: {options.mem_mb} MB, {options.nproc} processes, {options.cpu} CPU s; sandbox: "
        "audit hook"
        + SANDBOX_WORDS[mode].format(hidden="" if options.no_hide else "hidden folders, "),
        flush=True,
    )
    done, lock, start = [0], threading.Lock(), time.monotonic()

    def work(item):
        number, (student, path) = item
        uid = users.get()
        try:
            outcome = grade_notebook(Notebook(student, path, number, uid, options, place))
        finally:
            users.put(uid)
        with lock:
            done[0] += 1
            print(
                f"[{done[0]}/{len(tasks)}] {student}/{outcome['name']}: {outcome_line(outcome['report'])} "
                f"({outcome['report'].get('seconds', 0):.0f} s)  "
                f"{progress_line(done[0], len(tasks), time.monotonic() - start)}",
                flush=True,
            )
        return student, outcome

    try:
        with ThreadPoolExecutor(max_workers=options.jobs) as pool:
            return list(pool.map(work, enumerate(tasks)))
    finally:
        if not options.keep:
            shutil.rmtree(scratch, ignore_errors=True)
