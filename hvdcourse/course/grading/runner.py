"""Execute one student notebook in its sandbox and report what happened (lesson: Instructor guide).

Started by the grader as ``python -m hvdcourse.course.grading.runner --job JOB.json`` (under ``unshare``
where available), in its own session. It copies the notebook into the sandbox folder (converting
old formats), hides the denied folders when it runs in a private mount namespace, and then runs the
submission twice, each time under the limits of :mod:`hvdcourse.course.grading.confine` and, when the
grader runs as root, as the sandbox's own user:

1. the *notebook run*: the course kernel (whatever kernel the notebook names) executes the cells one
   by one, with a per-cell time limit and an output cap, under the audit hook of
   :mod:`hvdcourse.course.grading.audit`; its cell errors and problems go into the report;
2. the *answer run* (:mod:`hvdcourse.course.grading.answers`): only the definitions that
   :mod:`hvdcourse.course.grading.extract` keeps from the notebook's text, observed by the checks and
   written out as data.

Between and after the runs every process of the submission is killed. No check is decided here:
the grader's judge (:mod:`hvdcourse.course.grading.judge`) does that from the report and the answer data.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from hvdcourse.course.grading import bwrap, confine, processes
from hvdcourse.course.grading import hidden as hidden_inputs
from hvdcourse.course.grading.job import Job, Report, Stages, Status

KERNEL_NAME = "hvdcourse-grading"
MAX_ANSWER_BYTES = 50_000_000
# the answer process's stages (it stamps their ends): its start, its imports, the notebook's
# definitions, the checks
ANSWER_STAGES = ("start", "imports", "definitions", "checks")


def hide(folders: list) -> list:
    """Cover ``folders`` with empty read-only tmpfs mounts (only in a private mount namespace)."""
    hidden = []
    for folder in folders:
        if os.path.isdir(folder):
            run = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "ro,size=4k,mode=000", "hvdcourse-hidden", folder],
                capture_output=True,
                text=True,
            )
            if run.returncode == 0:
                hidden.append(folder)
    return hidden


def give(path: str, uid) -> None:
    """Make ``path`` (and what is under it) belong to the sandbox user."""
    if uid is None:
        return
    os.lchown(path, uid, uid)
    for folder, dirs, files in os.walk(path):
        for name in [folder] + [os.path.join(folder, n) for n in dirs + files]:
            os.lchown(name, uid, uid)


def sandbox_env(job: Job, workdir: str, log: str) -> dict:
    """The environment of a submission's processes: audit hook via sitecustomize, everything writable
    inside ``workdir``, the course package from the folder the grader was loaded from."""
    from hvdcourse.course.grading.audit import ENV
    from hvdcourse.runtime.mpienv import launch_env

    home = os.path.join(workdir, "home")
    tmp = os.path.join(workdir, "tmp")
    for folder in (home, tmp):
        os.makedirs(folder, exist_ok=True)
    keras = os.path.join(job.site, "data", "keras-mnist.npz")
    if os.path.isfile(keras):  # the full MNIST where Keras (and hvdcourse.data) look for it
        os.makedirs(os.path.join(home, ".keras", "datasets"), exist_ok=True)
        shutil.copyfile(keras, os.path.join(home, ".keras", "datasets", "mnist.npz"))
    policy = {"workdir": workdir, "deny": job.deny, "log": log}
    base = {
        k: os.environ[k]
        for k in ("PATH", "LANG", "LC_ALL", "TF_CPP_MIN_LOG_LEVEL")
        if k in os.environ
    }
    return launch_env(
        {
            "HOME": home,
            "TMPDIR": tmp,
            "IPYTHONDIR": os.path.join(home, ".ipython"),
            "MPLCONFIGDIR": os.path.join(home, ".matplotlib"),
            "XDG_CACHE_HOME": os.path.join(home, ".cache"),
            "XDG_CONFIG_HOME": os.path.join(home, ".config"),
            "MPLBACKEND": "Agg",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": os.pathsep.join([job.site, job.root]),
            "HVDCOURSE_GRADING": "1",
            ENV: json.dumps(policy),
            "JUPYTER_PLATFORM_DIRS": "1",
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            processes.TOKEN: os.environ.get(processes.TOKEN, ""),
            "HVDCOURSE_CACHE": os.path.join(job.site, "data"),
        },
        base=base,
    )


def prepare_site(job: Job) -> str:
    """The read-only folder of the sandbox's sitecustomize (audit hook) and the course kernel's spec."""
    site, uid = job.site, job.uid
    os.makedirs(site, mode=0o755, exist_ok=True)
    with open(os.path.join(site, "sitecustomize.py"), "w") as fh:
        fh.write("from hvdcourse.course.grading import audit\naudit.install()\n")
    log = os.path.join(site, "violations.jsonl")
    open(log, "a").close()
    os.chmod(log, 0o600)
    give(log, uid)
    spec = os.path.join(site, "kernels", KERNEL_NAME)
    os.makedirs(spec, exist_ok=True)
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    if job.bwrap:  # its parent is bubblewrap's init, pid 1: not a sign that the runner ended
        kernel.append("--IPKernelApp.parent_handle=0")
    kernel = confine.command(job.limits, uid, kernel, give="{connection_file}")
    with open(os.path.join(spec, "kernel.json"), "w") as fh:
        json.dump(
            {
                "argv": confined(job, job.sandbox, kernel),
                "display_name": "Python 3 (course grader)",
                "language": "python",
            },
            fh,
        )
    os.makedirs(os.path.join(site, "runtime"), mode=0o755, exist_ok=True)
    for folder, dirs, files in os.walk(site):
        os.chmod(folder, 0o755)
    return log


def share_data(folder: str) -> None:
    """Copy the grader's MNIST into the sandbox's read-only site: the sandbox user has its own HOME
    and cache and may not enter the grader's (under /root), so without this a correct training answer
    would fail with 'no MNIST here'."""
    from hvdcourse.examples import data

    os.makedirs(folder, mode=0o755, exist_ok=True)
    for source, name in (
        (data.NPM_CACHE, os.path.basename(data.NPM_CACHE)),
        (data.KERAS_CACHE, "keras-mnist.npz"),
    ):
        if os.path.isfile(source):
            shutil.copyfile(source, os.path.join(folder, name))
            os.chmod(os.path.join(folder, name), 0o644)


def kernel_env(job: Job, sandbox: str, log: str) -> dict:
    """The kernel's environment (see :func:`sandbox_env`) and its output cap at startup."""
    env = sandbox_env(job, sandbox, log)
    startup = os.path.join(env["IPYTHONDIR"], "profile_default", "startup")
    os.makedirs(startup, exist_ok=True)
    with open(os.path.join(startup, "00-hvdcourse-output-cap.py"), "w") as fh:
        fh.write(
            f"from hvdcourse.course.grading.kernel_side import cap_output\ncap_output({job.output_cap})\n"
        )
    give(sandbox, job.uid)
    return env


def blocking_ancestor(path: str):
    """(the first folder above ``path`` that other users cannot enter, its child on the way) or None."""
    import stat

    real = os.path.realpath(path)
    parts = real.split("/")
    for i in range(2, len(parts)):
        folder = "/".join(parts[:i]) or "/"
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return folder, "/".join(parts[: i + 1])
    return None


def make_reachable(paths: list, stage: str) -> list:
    """In the private mount namespace, let the sandbox user reach ``paths`` (the interpreter, the venv)
    when a folder above them is closed (a Python under /root): that folder is covered by an empty
    tmpfs holding only the way to them. Returns the folders covered."""
    covered = []
    for path in paths:
        found = blocking_ancestor(path)
        if found is None:
            continue
        folder, child = found
        keep = os.path.join(stage, str(len(covered)))
        os.makedirs(keep)
        steps = [
            ["mount", "--bind", child, keep],
            ["mount", "-t", "tmpfs", "-o", "mode=0711,size=64k", "hvdcourse-reach", folder],
            ["mkdir", "-p", child],
            ["mount", "--bind", keep, child],
        ]
        for step in steps:
            if subprocess.run(step, capture_output=True).returncode != 0:
                raise RuntimeError(
                    f"cannot make {path} reachable for the sandbox user ({' '.join(step)} failed); "
                    "run the grader with a Python that all users can run, or as a normal user"
                )
        covered.append(folder)
    return covered


def confined(job: Job, workdir: str, cmd: list) -> list:
    """``cmd`` inside bubblewrap when the grader is not root (see :mod:`hvdcourse.course.grading.bwrap`)."""
    sandbox = job.bwrap
    if not sandbox:
        return cmd
    return bwrap.command(job.as_dict(), workdir, cmd, exe=sandbox["exe"], hide=sandbox["hide"])


def killed_by(job: Job, returncode) -> int | None:
    """The signal that ended a submission's process (bwrap exits with 128 + the signal)."""
    if job.bwrap:
        return bwrap.exit_signal(returncode)
    return -returncode if returncode is not None and returncode < 0 else None


class OutputCapExceeded(Exception):
    """A cell printed more than the grader accepts."""


def _capped_client(
    nb, sandbox: str, cell_timeout: float, output_cap: int, site: str, ipc: bool = False
):
    """An nbclient client that interrupts a cell as soon as the notebook's output passes ``output_cap`` bytes,
    and starts the course kernel of ``site`` (see :func:`prepare_site`); ``ipc``: through Unix sockets
    in ``sandbox`` (a kernel in bubblewrap has a network of its own)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from nbclient import NotebookClient

    class CappedClient(NotebookClient):
        output_bytes = 0

        def create_kernel_manager(self):
            # the one folder of kernel specs, named: jupyter_client's default list of folders
            # imports IPython to find one of them (1.5 s of CPU in every runner)
            specs = KernelSpecManager(kernel_dirs=[os.path.join(site, "kernels")])
            self.km = self.kernel_manager_class(
                kernel_name=self.kernel_name, kernel_spec_manager=specs, config=self.config
            )
            # the sockets in the sandbox's folder, the connection file in its read-only site
            if ipc:
                self.km.transport = "ipc"
                self.km.ip = os.path.join(sandbox, "kernel")
                self.km.connection_file = os.path.join(site, "runtime", "kernel.json")
            return self.km

        def output(self, outs, msg, display_id, cell_index):
            self.output_bytes += len(json.dumps(msg.get("content", {})))
            if self.output_bytes > output_cap:
                # stop the cell at its source (the kernel itself: a signal to bubblewrap would kill it)
                pid = self.km.provisioner.process.pid
                os.kill(bwrap.sandboxed(pid) if ipc else pid, signal.SIGINT)
                raise OutputCapExceeded(cell_index)
            return super().output(outs, msg, display_id, cell_index)

    return CappedClient(
        nb,
        timeout=cell_timeout,
        kernel_name=KERNEL_NAME,
        allow_errors=True,
        interrupt_on_timeout=False,
        # a kill, not a shutdown request and up to 5 s of waiting: every process of the notebook
        # is killed right after anyway (stop_everything)
        shutdown_kernel="immediate",
        resources={"metadata": {"path": sandbox}},
    )


def _first_line(text: str, width: int = 200) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:width]


def _kernel_exit(client):
    try:
        return client.km.provisioner.process.poll()
    except AttributeError:
        return None


def execute(job: Job, nb, log: str, stages: Stages | None = None) -> dict:
    """The notebook run: the cells in the course kernel; the report's status, cell errors and problem.
    ``stages`` gets the kernel's start, the cells and the kernel's stop."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    sandbox = job.sandbox
    report = {
        "status": Status.OK,
        "errors": [],
        "results": [],
        "violations": [],
        "hidden": [],
        "problem": "",
        "cells": len(nb.cells),
    }
    env = kernel_env(job, sandbox, log)
    # the course kernel's spec, whatever the notebook names
    os.environ["JUPYTER_PATH"] = job.site
    os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(job.site, "runtime")
    client = _capped_client(
        nb, sandbox, int(job.cell_timeout), job.output_cap, job.site, ipc=bool(job.bwrap)
    )
    deadline = time.monotonic() + job.timeout
    start, index = time.monotonic(), 0
    stages = stages or Stages()
    try:
        with client.setup_kernel(env=env, cwd=sandbox):
            stages.lap("kernel_start")
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code" or report["status"] == Status.OUTPUT_CAP:
                    continue
                left = deadline - time.monotonic()
                if left <= 1:
                    raise CellTimeoutError(f"no time left for cell {index + 1}")
                client.timeout = max(1, int(min(job.cell_timeout, left)))
                try:
                    client.execute_cell(cell, index)
                    stages.lap("cells")
                except CellTimeoutError:
                    stages.lap("cells")  # the kernel's stop comes after
                    raise
                except DeadKernelError as err:
                    stages.lap("cells")
                    # read it now: leaving the kernel's context forgets it
                    err.exit_code = _kernel_exit(client)
                    raise
                except OutputCapExceeded:
                    stages.lap("cells")
                    report["status"] = Status.OUTPUT_CAP
                    report["problem"] = (
                        f"cell {index + 1} printed more than {job.output_cap // 1000} kB; it "
                        "was interrupted and the cells after it were not run (the answers "
                        "it defines were still graded)"
                    )
                    report["output_bytes"] = client.output_bytes
                    cell.outputs = []
                    continue
                for out in cell.get("outputs", []):
                    if out.get("output_type") == "error":
                        report["errors"].append(
                            {
                                "cell": index + 1,
                                "ename": out.get("ename", ""),
                                "evalue": _first_line(out.get("evalue", "")),
                            }
                        )
        capped = [e["cell"] for e in report["errors"] if e["ename"] == "OutputLimitExceeded"]
        if capped and report["status"] == Status.OK:
            report["status"] = Status.OUTPUT_CAP
            report["problem"] = (
                f"cell {capped[0]} printed more than {job.output_cap // 1000} kB; its output "
                "was cut there (the other cells ran and were graded)"
            )
        limited = [
            e
            for e in report["errors"]
            if e["ename"] == "MemoryError"
            or e["ename"] == "BlockingIOError"
            or "Resource temporarily unavailable" in e["evalue"]
            or "can't start new thread" in e["evalue"]
        ]
        if limited and report["status"] == Status.OK:
            memory = limited[0]["ename"] == "MemoryError"
            report["status"] = Status.MEMORY_LIMIT if memory else Status.PROCESS_LIMIT
            report["problem"] = (
                f"cell {limited[0]['cell']} hit the grader's limit of "
                + (
                    f"{job.limits['mem_mb']} MB of memory per process"
                    if memory
                    else f"{job.limits['nproc']} processes and threads"
                )
                + " and was stopped there; the other cells ran"
            )
    except CellTimeoutError:
        report["status"] = Status.TIMEOUT
        report["problem"] = (
            f"cell {index + 1} was still running after {client.timeout} s (an endless loop, or "
            "a rank waiting for another?); the kernel and everything it started were stopped"
        )
    except DeadKernelError as err:
        code = getattr(err, "exit_code", None)
        if killed_by(job, code) == signal.SIGXCPU:
            report["status"] = Status.CPU_LIMIT
            report["problem"] = (
                f"the kernel used more than {job.limits['cpu']} s of CPU time in cell "
                f"{index + 1} and was stopped (the grader's CPU limit); the cells after it were "
                "not run"
            )
        else:
            report["status"] = Status.KERNEL_DIED
            report["problem"] = (
                f"the Python kernel died in cell {index + 1} (sys.exit/exit(), os._exit, a crash "
                "or running out of memory); the cells after it were not run"
            )
    finally:
        report["seconds"] = round(time.monotonic() - start, 1)
        report.setdefault("output_bytes", client.output_bytes)
        stop_everything(job)
        stages.lap("kernel_stop")
    return report


def children_cpu() -> float:
    """CPU seconds (user + system) of this runner's ended child processes and what they waited for:
    read before and after a run, the difference is that run's CPU time (the kernel or the answer
    process, with the ranks and everything else they started and waited for)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stop_everything(job: Job) -> None:
    """Kill every process of the submission: by its user (root grader) and by its token."""
    processes.kill_user(job.uid)
    processes.kill_tagged(os.environ.get(processes.TOKEN, ""), spare=os.getpid())


def exercises_of(job: Job, extracted) -> list:
    """The notebook's exercises: from its metadata, else every exercise whose answers it defines."""
    from hvdcourse.course.exercises.checks import EXERCISES

    if job.exercises:
        return list(job.exercises)
    return [
        e.id
        for e in EXERCISES.values()
        if all(extracted.facts(n)["kind"] not in ("missing", "left-out") for n in e.answers)
    ]


def read_untrusted(path: str, limit: int = MAX_ANSWER_BYTES):
    """JSON from a file the sandbox's user wrote: a regular file, not a link, at most ``limit`` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        import stat

        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{info.st_size} bytes, more than the {limit} the grader reads")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return json.loads(fh.read(limit + 1))
    finally:
        os.close(fd)


def run_answers(
    job: Job, nb, log: str, report: dict, stages: Stages | None = None, inputs: str = ""
) -> None:
    """The answer run (see the module's docstring); fills ``static``, ``exercises``, ``answers``;
    ``stages`` gets the answer process's start, imports, definitions, checks and stop; ``inputs``:
    the grader's inputs (:func:`hvdcourse.course.grading.hidden.encode`), for the answer run's job."""
    from hvdcourse.course.exercises import replay
    from hvdcourse.course.exercises.checks import EXERCISES
    from hvdcourse.course.grading.extract import extract

    extracted = extract(nb)
    exercises = exercises_of(job, extracted)
    names = sorted({n for ex in exercises for n in EXERCISES[ex].answers})
    static = {}
    for name in names:
        facts = extracted.facts(name)
        if "value" in facts:
            facts["value"] = replay.encode(facts["value"])
        static[name] = facts
    report.update(
        exercises=exercises,
        static=static,
        left_out=extracted.left_out[:20],
        unparsable=extracted.unparsable[:20],
    )
    if not exercises:
        return
    folder = job.answers_dir
    os.makedirs(folder, exist_ok=True)
    cells = [
        (number, source, [(st.lineno, st.col_offset) for st in tree.body])
        for number, source, tree in extracted.cells
    ]
    with open(os.path.join(folder, "job.json"), "w") as fh:
        # the grader's inputs (not its answer keys): the sandbox's user cannot read the keys
        json.dump({"cells": cells, "exercises": exercises, "hidden": inputs}, fh)
    out = os.path.join(folder, "answers.json")
    env = sandbox_env(job, folder, log)
    give(folder, job.uid)
    cmd = confine.command(
        job.limits,
        job.uid,
        [
            sys.executable,
            "-m",
            "hvdcourse.course.grading.answers",
            os.path.join(folder, "job.json"),
            out,
        ],
    )
    cmd = confined(job, folder, cmd)
    # the 2-rank checks of notebooks graded at once take turns
    stages = stages or Stages()
    held = take_rank_slot(job.rank_locks)
    stages.lap("answers_prepare")  # the notebook's extraction, and a turn for the rank checks
    start = time.monotonic()
    with held, open(os.path.join(job.private, "answers.log"), "wb") as logfh:
        proc = subprocess.Popen(
            cmd, stdout=logfh, stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True
        )
        try:
            proc.wait(timeout=job.check_timeout)
        except subprocess.TimeoutExpired:
            report["answer_problem"] = (
                f"the checks of your answers did not finish within {job.check_timeout:g} s "
                "and were stopped"
            )
        finally:
            stop_everything(job)
            proc.wait()
    report["check_seconds"] = round(time.monotonic() - start, 1)
    if killed_by(job, proc.returncode) == signal.SIGXCPU:
        report["answer_problem"] = (
            f"the checks of your answers used more than {job.limits['cpu']} s of CPU time"
        )
    ended = time.time()
    try:
        report["answers"] = read_untrusted(out)
        # the answer process's own stamps: informative only, never used to decide anything
        stamps = (
            report["answers"].pop("stamps", None) if isinstance(report["answers"], dict) else None
        )
        if isinstance(stamps, list):
            for stage, stamp in stamps[:4]:
                if (
                    stage in ANSWER_STAGES
                    and isinstance(stamp, (int, float))
                    and stages.last <= stamp <= ended
                ):
                    stages.lap(f"answers_{stage}", stamp)
    except (OSError, ValueError) as err:
        with open(os.path.join(job.private, "answers.log"), "rb") as fh:
            tail = fh.read()[-4000:].decode(errors="replace").strip().splitlines()[-1:]
        report.setdefault(
            "answer_problem",
            f"the answer run left no data ({type(err).__name__}: "
            f"{_first_line(err)}; {' '.join(tail)[:200]})",
        )
    stages.lap("answers_stop", ended)


class _Slot:
    def __init__(self, fh=None):
        self.fh = fh

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.fh is not None:
            self.fh.close()  # releases the lock
        return False


def take_rank_slot(locks: list) -> _Slot:
    """Hold one of the grader's rank-check locks (wait for a free one); no locks: nothing to wait for."""
    import fcntl

    if len(locks) == 1:  # one slot (--jobs auto on 2 cores): wait in the kernel, not by polling
        fh = open(locks[0], "a")
        fcntl.flock(fh, fcntl.LOCK_EX)
        return _Slot(fh)
    while locks:
        for path in locks:
            fh = open(path, "a")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return _Slot(fh)
            except OSError:
                fh.close()
        time.sleep(0.2)
    return _Slot()


def convert(path: str, dest: str) -> list:
    """Copy the notebook to ``dest`` as format 4; return notes (old format converted, foreign kernel)."""
    import nbformat

    notes = []
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    major = raw.get("nbformat", 4)
    nb = nbformat.reads(json.dumps(raw), as_version=4)
    if major < 4:
        notes.append(
            f"the notebook was saved in the old format {major}; the grader converted it to format 4"
        )
    kernel = (nb.metadata.get("kernelspec") or {}).get("name", "python3")
    language = (nb.metadata.get("kernelspec") or {}).get("language", "python")
    if kernel not in ("python3", "python") or language != "python":
        notes.append(
            f"the notebook names the kernel {kernel!r}; it was run with the course's Python 3 kernel"
        )
    nbformat.write(nb, dest)
    return notes


def skip_slow_schema_formats() -> None:
    """Keep jsonschema from importing ``rfc3987_syntax`` (present with JupyterLab), which builds a
    grammar at import time (1.3 s of every notebook graded) only to check "iri" formats that the
    notebook schema does not use; jsonschema skips that check when the import fails."""
    sys.modules.setdefault("rfc3987_syntax", None)


@dataclasses.dataclass
class Run:
    """One submission on its way through the runner's :data:`STAGES`."""

    job: Job
    stages: Stages
    report: Report
    notes: list = dataclasses.field(default_factory=list)  # what was changed to run it
    inputs: str = ""  # the grader's inputs for the answer run (never its answer keys)
    hidden: list = dataclasses.field(default_factory=list)  # the folders hidden from it
    log: str = ""  # the audit hook's violation log
    nb: object = None  # the notebook as copied

    @property
    def submission(self) -> str:
        return os.path.join(self.job.sandbox, "submission.ipynb")


def copy_notebook(run: Run) -> None:
    """Into the sandbox, as format 4 (before the submissions are hidden)."""
    run.notes = convert(run.job.notebook, run.submission)


def read_inputs(run: Run) -> None:
    """The grader's inputs for the answer run (before the keys may be hidden)."""
    run.inputs = hidden_inputs.encode(hidden_inputs.load())


def copy_data(run: Run) -> None:
    """MNIST into the sandbox's site (before /root may be covered by :func:`reach_python`)."""
    share_data(os.path.join(run.job.site, "data"))


def hide_denied(run: Run) -> None:
    """The denied folders out of sight: tmpfs mounts here, or bubblewrap's own."""
    job = run.job
    run.hidden = hide(job.deny) if job.hide else []
    if (job.bwrap or {}).get("hide"):
        run.hidden = [d for d in job.deny if os.path.isdir(d)]


def reach_python(run: Run) -> None:
    """The interpreter and the course within the sandbox user's reach."""
    job = run.job
    if job.uid is not None:
        make_reachable([sys.executable, sys.prefix, job.root], os.path.join(job.private, "reach"))


def prepare(run: Run) -> None:
    """The sandbox's site (audit hook, kernel spec) and the notebook, read."""
    import nbformat

    run.log = prepare_site(run.job)
    run.nb = nbformat.read(run.submission, as_version=4)
    run.stages.lap("prepare")


def notebook_run(run: Run) -> None:
    """The notebook's cells in the course kernel (see :func:`execute`)."""
    import nbformat

    cpu = children_cpu()
    run.report = execute(run.job, nbformat.read(run.submission, as_version=4), run.log, run.stages)
    run.report["notes"] = run.notes
    run.report["cpu"] = {"notebook": round(children_cpu() - cpu, 1)}


def answer_run(run: Run) -> None:
    """The notebook's definitions, observed by the checks (see :func:`run_answers`)."""
    cpu = children_cpu()
    run_answers(run.job, run.nb, run.log, run.report, run.stages, run.inputs)
    run.report["cpu"]["answers"] = round(children_cpu() - cpu, 1)


# a submission's way through the runner, in order
STAGES = (
    copy_notebook,
    read_inputs,
    copy_data,
    hide_denied,
    reach_python,
    prepare,
    notebook_run,
    answer_run,
)


def read_violations(run: Run) -> None:
    """What the audit hook denied, each (kind, path) once; a log that is not its own says so."""
    log = os.path.join(run.job.site, "violations.jsonl")
    if not os.path.isfile(log):
        return
    seen = set()
    try:
        for line in open(log):
            entry = json.loads(line)
            key = (entry["kind"], entry["path"])
            if key not in seen:
                seen.add(key)
                run.report["violations"].append(
                    {k: str(entry.get(k, ""))[:300] for k in ("kind", "path", "event")}
                )
    except (ValueError, KeyError, TypeError, AttributeError):
        run.report["violations"].append(
            {"kind": "tampered", "path": log, "event": "the violation log was edited"}
        )


def main(argv=None) -> int:
    began = time.time()
    skip_slow_schema_formats()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--job", required=True, help="JSON file describing the job (written by the grader)"
    )
    args = parser.parse_args(argv)
    job = Job.read(args.job)
    # the grader's stamp when it started this process
    stages = Stages(job.started or began)
    stages.lap("runner_start", began)
    stages.lap("runner_imports")
    run = Run(
        job, stages, Report(status=Status.NOT_RUN, problem="", errors=[], results=[], violations=[])
    )
    try:
        for stage in STAGES:
            stage(run)
    except Exception as err:  # the notebook could not be run at all: say why, do not stop the batch
        run.report.update(
            status=Status.NOT_RUN, problem=f"{type(err).__name__}: {_first_line(err)}"
        )
    finally:
        stop_everything(job)
    read_violations(run)
    run.report["hidden"] = run.hidden
    stages.lap("runner_stop")
    run.report["timing"] = stages.seconds
    tmp = job.report + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(run.report, fh)
    os.replace(tmp, job.report)
    return 0


if __name__ == "__main__":
    code = main()
    # the report is written and every process of the submission is gone: skip the interpreter's
    # clean-up (0.4-1.3 s, mostly the kernel client's ZeroMQ sockets lingering for a killed kernel)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
