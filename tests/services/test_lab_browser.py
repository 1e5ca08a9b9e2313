"""`make lab` in a real browser: headless Chromium (Playwright) on the lab that
``python -m hvdcourse.course.services.lab`` starts, with a port and a token.

One run serves every test (module fixture): the lab opens lesson 03 (*Parameter servers and
ring-allreduce*) as a notebook on the course's kernel and runs every code cell before the one that
calls ``hvd.shutdown()`` ("Run All Above Selected Cell" on that cell): the set-up, the cell that
starts 2 MPI engines, the ring-allreduce and Horovod ``%%px`` cells, the plots, the averaged matrix
on both ranks; not the last three, which shut Horovod down, stop the engines and print the page's
time. Ctrl-C (SIGINT) then stops the lab with its engines still
running, which is the case the lab's clean-up must handle.

The browser's lab state (settings, workspaces, runtime files, IPython profile) lives in the test's
temporary folder; autosave is off, so the lesson file is never rewritten.
"""

from __future__ import annotations

import hashlib
import re
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from conftest import CHROMIUM, CHROMIUM_ARGS as ARGS
from hvdcourse.runtime import processes
from hvdcourse.runtime.paths import BUILD, ROOT

LESSON = "notebooks/03_allreduce.md"


def _cells_before_shutdown(path: str) -> int:
    """How many code cells come before the lesson's ``hvd.shutdown()`` cell (the first of its last three)."""
    with open(path) as fh:
        cells = fh.read().split("```{code-cell}")[1:]
    for index, cell in enumerate(cells):
        if "hvd.shutdown()" in cell.split("```")[0]:
            return index
    raise AssertionError(
        f"{path} has no code cell with hvd.shutdown(): the test runs up to that cell"
    )


RUN_THROUGH = _cells_before_shutdown(
    os.path.join(ROOT, LESSON)
)  # code cells run (module docstring)
SCREENSHOT = os.path.join(BUILD, "lab", "screenshot.png")  # kept for the closing note
MARK = "HVDCOURSE_LAB_TEST"
# JupyterLab user settings for the test: every cell in the page (no virtual scrolling, so the test
# reads every output), no autosave, no news pop-up in the screenshot
USER_SETTINGS = {
    "notebook-extension/tracker": {"windowingMode": "none"},
    "docmanager-extension/plugin": {"autosave": False},
    "apputils-extension/notification": {"fetchNews": "false"},
}
PROMPTS_JS = "() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(e => e.innerText.trim())"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _api(base: str, token: str, path: str):
    request = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def _census(marker: str) -> dict:
    """The lab's processes by role (from their command lines), and all of them as (pid, command)."""
    found = {"kernel": 0, "engine": 0, "mpirun": 0}
    procs = processes.describe(processes.with_env(MARK, marker))
    for _, cmd in procs:
        program = os.path.basename(cmd.split()[0]) if cmd.split() else ""
        if program in ("mpirun", "mpiexec", "orterun", "prterun"):
            found["mpirun"] += 1
        elif "ipyparallel.engine" in cmd.split():  # not its nanny, ipyparallel.engine.nanny
            found["engine"] += 1
        elif "ipykernel_launcher" in cmd:
            found["kernel"] += 1
    return {**found, "all": procs}


def _settings_dir(state: str) -> str:
    folder = os.path.join(state, "user-settings")
    for name, value in USER_SETTINGS.items():
        plugin, _, setting = name.partition("/")
        os.makedirs(os.path.join(folder, "@jupyterlab", plugin), exist_ok=True)
        with open(
            os.path.join(folder, "@jupyterlab", plugin, f"{setting}.jupyterlab-settings"), "w"
        ) as fh:
            json.dump(value, fh)
    return folder


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    state = str(tmp_path_factory.mktemp("lab"))
    marker = secrets.token_hex(8)
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        **{MARK: marker},
        JUPYTERLAB_SETTINGS_DIR=_settings_dir(state),
        JUPYTERLAB_WORKSPACES_DIR=os.path.join(state, "workspaces"),
        JUPYTER_RUNTIME_DIR=os.path.join(state, "runtime"),
        IPYTHONDIR=os.path.join(state, "ipython"),
    )
    lesson_before = _sha256(os.path.join(ROOT, LESSON))
    run = {"port": port, "token": token, "lines": []}
    started = time.monotonic()
    lab = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hvdcourse.course.services.lab",
            "--port",
            str(port),
            "--token",
            token,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url_seen = threading.Event()

    def read():
        for line in lab.stdout:
            run["lines"].append(line.rstrip())
            if "JupyterLab for the course:" in line:
                url_seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert url_seen.wait(120), "the lab printed no URL:\n" + "\n".join(run["lines"])
        url = next(line for line in run["lines"] if "JupyterLab for the course:" in line).split()[
            -1
        ]
        run["url"] = url
        base = url.split("/lab?")[0]
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            run["page_errors"] = []
            page.on("pageerror", lambda err: run["page_errors"].append(str(err)))
            page.goto(f"{base}/lab/tree/{LESSON}?token={token}")
            page.wait_for_function(
                "() => document.querySelectorAll('.jp-Notebook .jp-CodeCell').length > 8",
                timeout=120_000,
            )
            # the kernel is up when the toolbar's kernel name reads "Python 3" and the status is idle
            page.wait_for_function(
                "() => /Python 3 \\| Idle/.test(document.body.innerText)", timeout=120_000
            )
            run["kernelspecs"] = _api(base, token, "/api/kernelspecs")
            run["kernels"] = _api(base, token, "/api/kernels")
            run["code_cells"] = page.locator(".jp-Notebook .jp-CodeCell").count()
            opened = time.monotonic()
            page.locator(".jp-CodeCell").nth(RUN_THROUGH).locator(".jp-InputPrompt").click()
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Above Selected Cell").first.click()
            page.wait_for_function(
                f"() => {{ const p = ({PROMPTS_JS})().slice(0, {RUN_THROUGH}); "
                "return p.length && p.every(t => /^\\[\\d+\\]:$/.test(t)); }",
                timeout=400_000,
            )
            run["run_seconds"] = time.monotonic() - opened
            # a %%px cell's prompt may show its number before the last rank's stream reaches the page
            # (seen: rank 0's line of the ring cell missing when the outputs were read)
            try:
                page.wait_for_function(
                    "() => { const t = document.body.innerText; "
                    "return /Python 3 \\| Idle/.test(t) && /Horovod rank 0 of 2/.test(t) "
                    "&& /Horovod rank 1 of 2/.test(t) && /\\[stdout:0\\]\\s*rank 0 of 2/.test(t) "
                    "&& /\\[stdout:1\\]\\s*rank 1 of 2/.test(t); }",
                    timeout=60_000,
                )
            except PlaywrightTimeout:
                pass  # the test on the ranks' output reports what is missing
            run["prompts"] = page.evaluate(PROMPTS_JS)
            run["outputs"] = page.evaluate(
                "() => [...document.querySelectorAll('.jp-CodeCell')].map(c => "
                "[...c.querySelectorAll('.jp-OutputArea-output')].map(o => "
                "({mime: o.getAttribute('data-mime-type'), text: o.innerText})))"
            )
            run["census"] = _census(marker)
            page.locator(".jp-CodeCell").nth(RUN_THROUGH - 2).scroll_into_view_if_needed()
            shot = os.path.join(state, "lab.png")
            page.screenshot(path=shot)
            os.makedirs(os.path.dirname(SCREENSHOT), exist_ok=True)
            shutil.copyfile(shot, SCREENSHOT)
            print(f"\nscreenshot of the lab: {SCREENSHOT} (and {shot})")
            browser.close()
    finally:
        lab.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            run["returncode"] = lab.wait(120)
        except subprocess.TimeoutExpired:
            run["returncode"] = None
        reader.join(10)
        # what the lab left behind is recorded for the test, then ended so the session stays clean
        left = processes.with_env(MARK, marker)
        run["left"] = processes.describe(left)
        processes.end(left + processes.by_pid([lab.pid]), grace=2)
        run["lesson_unchanged"] = _sha256(os.path.join(ROOT, LESSON)) == lesson_before
        run["seconds"] = time.monotonic() - started
        print(
            f"lab browser run: {run['seconds']:.0f} s in all, cells 1-{RUN_THROUGH}: "
            f"{run.get('run_seconds', 0):.0f} s"
        )
    return run


def _run_outputs(lab_run) -> list:
    return [out for cell in lab_run["outputs"][:RUN_THROUGH] for out in cell]


def test_the_lab_prints_its_url_with_the_port_and_token(lab_run):
    assert lab_run["url"] == f"http://127.0.0.1:{lab_run['port']}/lab?token={lab_run['token']}"


def test_the_lesson_opens_as_a_notebook_on_the_course_kernel(lab_run):
    with open(os.path.join(ROOT, LESSON)) as fh:
        assert lab_run["code_cells"] == fh.read().count("```{code-cell}")
    spec = lab_run["kernelspecs"]["kernelspecs"]["python3"]["spec"]
    assert spec["argv"][0] == sys.executable
    assert spec["env"]["TF_USE_LEGACY_KERAS"] == "1"
    assert [kernel["name"] for kernel in lab_run["kernels"]] == ["python3"]


def test_the_cells_run_in_order_and_the_rest_stays_unrun(lab_run):
    prompts = lab_run["prompts"]
    assert prompts[:RUN_THROUGH] == [f"[{n}]:" for n in range(1, RUN_THROUGH + 1)]
    assert set(prompts[RUN_THROUGH:]) == {"[ ]:"}


def test_px_cells_print_from_rank_0_and_rank_1(lab_run):
    # per cell: a rank's print may reach the page in more than one output (stream chunks); a rank's
    # output of several lines starts on the line after its [stdout:N] label
    texts = [" ".join(out["text"] for out in cell) for cell in lab_run["outputs"][:RUN_THROUGH]]
    ring = " ".join(text for text in texts if "ring sum" in text)
    horovod = " ".join(text for text in texts if "Horovod rank" in text)
    for rank in (0, 1):
        assert re.search(rf"\[stdout:{rank}\]\s*rank {rank} of 2", ring), lab_run["outputs"]
    assert "Horovod rank 0 of 2" in horovod and "Horovod rank 1 of 2" in horovod, lab_run["outputs"]
    assert horovod.count("sum equal: True, average equal: True") == 2


def test_no_cell_shows_an_error_or_stderr(lab_run):
    bad = [
        out
        for out in _run_outputs(lab_run)
        if out["mime"] in ("application/vnd.jupyter.error", "application/vnd.jupyter.stderr")
    ]
    assert bad == [] and lab_run["page_errors"] == []


def test_while_running_the_lab_had_a_kernel_and_two_mpi_engines(lab_run):
    census = lab_run["census"]
    assert (census["kernel"], census["engine"], census["mpirun"]) == (1, 2, 1), census["all"]


def test_ctrl_c_stops_the_lab_its_kernel_and_engines(lab_run):
    assert lab_run["returncode"] == 0, "\n".join(lab_run["lines"])
    assert lab_run["left"] == []
    assert "[lab] stopped; no process of the lab is left" in lab_run["lines"]


def test_the_lesson_file_is_left_as_it_was(lab_run):
    assert lab_run["lesson_unchanged"]


def _lab_cli(*args, code: str = "") -> subprocess.CompletedProcess:
    """``python -m hvdcourse.course.services.lab ARGS`` (after ``code``, run first in the same process)."""
    script = f"{code}\nimport sys\nfrom hvdcourse.course.services.lab import main\nfrom hvdcourse.runtime.errors import run_cli\nsys.exit(run_cli(main, {list(args)!r}))"
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_a_port_in_use_is_a_one_line_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc = _lab_cli("--port", str(busy.getsockname()[1]))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "is in use" in proc.stderr and "--port" in proc.stderr


def test_missing_jupyterlab_is_a_one_line_error():
    proc = _lab_cli(code="import sys; sys.modules['jupyterlab'] = None  # as if not installed")
    assert proc.returncode == 2
    assert proc.stderr.startswith("hvdcourse: error: JupyterLab is not installed")
    assert proc.stderr.count("\n") == 1 and "make env" in proc.stderr
