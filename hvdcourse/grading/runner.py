"""Execute one student notebook in its sandbox and report what happened (lesson: instructor guide).

Started by the grader as ``python -m hvdcourse.grading.runner --job JOB.json`` (under ``unshare``
where available), in its own session. It copies the notebook into the sandbox folder, hides the
denied folders when it runs in a private mount namespace, starts a python3 kernel whose environment
installs the audit hook (:mod:`hvdcourse.grading.audit`) and keeps HOME, TMPDIR and caches inside
the sandbox, executes the cells one by one (a per-cell time limit, an output cap), appends the
grading cell, and writes a JSON report. Any process the submission left behind is killed.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time

from hvdcourse.grading import processes

RESULT_TAG = "HVDCOURSE-RESULT"
TOKEN_ENV = "HVDCOURSE_SUBMISSION_TOKEN"


def grading_cell(nonce: str, exercises: list) -> str:
    """The cell the grader appends: runs the checks on the answers the notebook defined."""
    return ("from hvdcourse.grading import kernel_side as _hvdcourse_grader\n"
            f"_hvdcourse_grader.grade(globals(), {nonce!r}, {exercises!r})\n")


def hide(folders: list) -> list:
    """Cover ``folders`` with empty read-only tmpfs mounts (only in a private mount namespace)."""
    hidden = []
    for folder in folders:
        if os.path.isdir(folder):
            run = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=4k,mode=000", "hvdcourse-hidden", folder],
                                 capture_output=True, text=True)
            if run.returncode == 0:
                hidden.append(folder)
    return hidden


def kernel_env(job: dict, sandbox: str, private: str) -> dict:
    """The kernel's environment: audit hook via sitecustomize, everything writable inside the sandbox."""
    from hvdcourse.grading.audit import ENV
    from hvdcourse.mpienv import launch_env

    home = os.path.join(sandbox, "home")
    tmp = os.path.join(sandbox, "tmp")
    for folder in (home, tmp):
        os.makedirs(folder, exist_ok=True)
    with open(os.path.join(private, "sitecustomize.py"), "w") as fh:
        fh.write("from hvdcourse.grading import audit\naudit.install()\n")
    startup = os.path.join(home, ".ipython", "profile_default", "startup")
    os.makedirs(startup, exist_ok=True)
    with open(os.path.join(startup, "00-hvdcourse-output-cap.py"), "w") as fh:
        fh.write(f"from hvdcourse.grading.kernel_side import cap_output\ncap_output({job['output_cap']})\n")
    pythonpath = [private] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    policy = {"workdir": sandbox, "deny": job["deny"], "log": os.path.join(private, "violations.jsonl")}
    return launch_env({
        "HOME": home, "TMPDIR": tmp, "IPYTHONDIR": os.path.join(home, ".ipython"),
        "MPLCONFIGDIR": os.path.join(home, ".matplotlib"), "XDG_CACHE_HOME": os.path.join(home, ".cache"),
        "XDG_CONFIG_HOME": os.path.join(home, ".config"), "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join(pythonpath), "HVDCOURSE_GRADING": "1", ENV: json.dumps(policy),
        "JUPYTER_PLATFORM_DIRS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    })


class OutputCapExceeded(Exception):
    """A cell printed more than the grader accepts."""


def _capped_client(nb, sandbox: str, cell_timeout: float, output_cap: int):
    """An nbclient client that interrupts a cell as soon as the notebook's output passes ``output_cap`` bytes."""
    from nbclient import NotebookClient

    class CappedClient(NotebookClient):
        output_bytes = 0

        def output(self, outs, msg, display_id, cell_index):
            self.output_bytes += len(json.dumps(msg.get("content", {})))
            if self.output_bytes > output_cap:
                os.kill(self.km.provisioner.process.pid, signal.SIGINT)  # stop the cell at its source
                raise OutputCapExceeded(cell_index)
            return super().output(outs, msg, display_id, cell_index)

    return CappedClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                        interrupt_on_timeout=False, resources={"metadata": {"path": sandbox}})


def _first_line(text: str, width: int = 200) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:width]


def execute(job: dict) -> dict:
    """Run the notebook; return the report (status, cell errors, check results, violations)."""
    import nbformat
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    sandbox, private = job["sandbox"], job["private"]
    report = {"status": "ok", "errors": [], "results": [], "violations": [], "hidden": [], "problem": ""}
    nb = nbformat.read(os.path.join(sandbox, "submission.ipynb"), as_version=4)
    report["cells"] = len(nb.cells)
    nonce = secrets.token_hex(8)
    nb.cells.append(nbformat.v4.new_code_cell(grading_cell(nonce, job["exercises"])))
    env = kernel_env(job, sandbox, private)
    client = _capped_client(nb, sandbox, int(job["cell_timeout"]), job["output_cap"])
    deadline = time.monotonic() + job["timeout"]
    start, index = time.monotonic(), 0
    try:
        with client.setup_kernel(env=env, cwd=sandbox):
            for index, cell in enumerate(nb.cells):
                grading = index == len(nb.cells) - 1  # the grader's own cell may use all that is left
                if cell.cell_type != "code" or (report["status"] == "output-cap" and not grading):
                    continue
                left = deadline - time.monotonic()
                if left <= 1:
                    raise CellTimeoutError(f"no time left for cell {index + 1}")
                client.timeout = max(1, int(left if grading else min(job["cell_timeout"], left)))
                with open(os.path.join(private, "progress"), "w") as fh:
                    fh.write(str(index + 1))
                try:
                    client.execute_cell(cell, index)
                except OutputCapExceeded:
                    report["status"] = "output-cap"
                    report["problem"] = (f"cell {index + 1} printed more than {job['output_cap'] // 1000} kB; it "
                                         "was interrupted and the cells after it were not run (the answers "
                                         "defined before it were still graded)")
                    report["output_bytes"] = client.output_bytes
                    client.output_bytes = -10 * job["output_cap"]  # room for the grader's own cell
                    cell.outputs = []
                    continue
                for out in cell.get("outputs", []):
                    if out.get("output_type") == "error" and not grading:
                        report["errors"].append({"cell": index + 1, "ename": out.get("ename", ""),
                                                 "evalue": _first_line(out.get("evalue", ""))})
        capped = [e["cell"] for e in report["errors"] if e["ename"] == "OutputLimitExceeded"]
        if capped and report["status"] == "ok":
            report["status"] = "output-cap"
            report["problem"] = (f"cell {capped[0]} printed more than {job['output_cap'] // 1000} kB; its output "
                                 "was cut there (the other cells ran and were graded)")
    except CellTimeoutError:
        report["status"] = "timeout"
        report["problem"] = (f"cell {index + 1} was still running after {client.timeout} s (an endless loop, or "
                             "a rank waiting for another?); the kernel and everything it started were stopped"
                             if index < report["cells"] else
                             "the checks did not finish within the notebook's time limit; they were stopped")
    except DeadKernelError:
        report["status"] = "kernel-died"
        report["problem"] = (f"the Python kernel died in cell {index + 1} (sys.exit/exit(), os._exit, a crash "
                             "or running out of memory); the cells after it were not run")
    finally:
        report["seconds"] = round(time.monotonic() - start, 1)
        report.setdefault("output_bytes", client.output_bytes)
        processes.kill_tagged(os.environ.get(TOKEN_ENV, ""), spare=os.getpid())
    if nb.cells and report["status"] in ("ok", "output-cap"):
        for out in nb.cells[-1].get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            for line in text.splitlines():
                if line.startswith(f"{RESULT_TAG} {nonce} "):
                    report["results"].append(json.loads(line.split(" ", 2)[2]))
        grading_errors = [o for o in nb.cells[-1].get("outputs", []) if o.get("output_type") == "error"]
        if grading_errors:
            report["status"] = "grading-failed"
            report["problem"] = (f"the grading cell failed ({grading_errors[0].get('ename')}: "
                                 f"{_first_line(grading_errors[0].get('evalue', ''))}); did the notebook "
                                 "replace or break the course's modules?")
    log = os.path.join(private, "violations.jsonl")
    if os.path.isfile(log):
        seen = set()
        for line in open(log):
            entry = json.loads(line)
            key = (entry["kind"], entry["path"])
            if key not in seen:
                seen.add(key)
                report["violations"].append(entry)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", required=True, help="JSON file describing the job (written by the grader)")
    args = parser.parse_args(argv)
    with open(args.job) as fh:
        job = json.load(fh)
    shutil.copyfile(job["notebook"], os.path.join(job["sandbox"], "submission.ipynb"))
    hidden = hide(job["deny"]) if job.get("hide") else []
    try:
        report = execute(job)
    except Exception as err:  # the notebook could not be run at all: say why, do not stop the batch
        report = {"status": "not-run", "problem": f"{type(err).__name__}: {_first_line(err)}", "errors": [],
                  "results": [], "violations": []}
    report["hidden"] = hidden
    tmp = job["report"] + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(report, fh)
    os.replace(tmp, job["report"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
