"""The class hub for a class (issue 32): HTTPS on loopback, and three learners in a real browser
through a round of release, collect, grade and return.

The hub is the session's ``hub`` fixture (tests/conftest.py: three new accounts, TLS with the
self-signed certificate the hub makes), shared with test_hub.py. Headless Chromium (Debian's, driven
by Playwright as in tests/services/test_lab_browser.py) logs in as the three learners; each opens exercise 2 in
their own home, writes an answer (two right, one a constant), runs it (its check runs on 2 MPI ranks)
and saves; ``hvdcourse-class`` releases, collects, grades and returns for the roster; each learner
reads their own feedback in the browser and is refused another learner's home and feedback. The
30-learner start is measured by ``python -m hvdcourse.course.hub.scale`` into book/data/hub_scale.json
(test_scale.py checks that record), not here.
"""

from __future__ import annotations

import csv
import json
import os
import pwd
import re
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest

from conftest import CHROMIUM, CHROMIUM_ARGS, course_cli

EXERCISE = "ex02_global_mean"
RIGHT = """import numpy as np

from hvdcourse.course.exercises import checks


def global_mean(hvd, local_values):
    import tensorflow as tf

    partial = tf.constant([float(np.sum(local_values)), float(len(local_values))], dtype=tf.float64)
    total, count = hvd.allreduce(partial, op=hvd.Sum).numpy()
    return float(total / count)
"""
CONSTANT = """import numpy as np

from hvdcourse.course.exercises import checks


def global_mean(hvd, local_values):
    return 2.5
"""
PROMPTS_JS = (
    "() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]"
    ".map(e => e.innerText.trim())"
)


def class_cli(*argv) -> subprocess.CompletedProcess:
    return course_cli("hvdcourse.course.classroom", *argv, timeout=900)


# --- TLS ---------------------------------------------------------------------------------------------
def test_the_hub_serves_https_on_loopback_with_its_certificate(hub):
    settings = hub["settings"]
    url = f"https://127.0.0.1:{settings['port']}/"
    assert url in hub["stdout"] and settings["tls"]["self_signed"]
    assert hub["api"].version() == "6.1.1"  # over TLS, trusting only the hub's certificate
    with pytest.raises(urllib.error.URLError) as untrusted:  # the system's CAs do not vouch for it
        urllib.request.urlopen(url + "hub/api/", timeout=10)
    assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
    plain = f"http://127.0.0.1:{settings['port']}/hub/api/"
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain, timeout=10)  # no plain HTTP on the learners' port
    context = ssl.create_default_context(cafile=settings["tls"]["cert"])
    context.check_hostname = False
    with socket.create_connection(("127.0.0.1", settings["port"]), timeout=10) as sock:
        with context.wrap_socket(sock) as tls:
            cert = tls.getpeercert()
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
    assert ("IP Address", "127.0.0.1") in cert["subjectAltName"]
    listening = {
        c.laddr.ip
        for c in psutil.net_connections("tcp")
        if c.status == "LISTEN" and c.laddr.port == settings["port"]
    }
    assert listening == {"127.0.0.1"}
    assert oct(os.stat(settings["tls"]["key"]).st_mode & 0o777) == "0o600"


# --- Three learners in a real browser, and the class round -------------------------------------------
def _login(page, base: str, name: str, password: str) -> None:
    page.goto(f"{base}hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", password)
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf"/user/{name}/lab"), timeout=240_000)


def _open_and_answer(page, base: str, name: str, code: str) -> None:
    page.goto(f"{base}user/{name}/lab/tree/exercises/{EXERCISE}.ipynb")
    page.wait_for_function(
        "() => document.querySelectorAll('.jp-Notebook .jp-CodeCell').length >= 2", timeout=180_000
    )
    page.wait_for_function(
        "() => /Python 3 \\| Idle/.test(document.body.innerText)", timeout=180_000
    )
    page.locator(".jp-Notebook .jp-CodeCell").first.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(code)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def _finish_and_save(page) -> dict:
    page.wait_for_function(
        f"() => {{ const p = ({PROMPTS_JS})(); "
        "return p.length >= 2 && p.every(t => /^\\[\\d+\\]:$/.test(t)); }",
        timeout=600_000,
    )
    page.wait_for_function(
        "() => /Python 3 \\| Idle/.test(document.body.innerText)", timeout=60_000
    )
    outputs = page.evaluate(
        "() => [...document.querySelectorAll('.jp-CodeCell')].map(c => "
        "[...c.querySelectorAll('.jp-OutputArea-output')].map(o => o.innerText).join('\\n'))"
    )
    page.locator(".jp-Notebook").first.click()
    page.keyboard.press("Control+s")
    return {"outputs": outputs}


def _answer_cell(path: str) -> str | None:
    """The source of the answer cell of the notebook at ``path`` as it is on disk (None mid-write)."""
    try:
        with open(path) as fh:
            return "".join(json.load(fh)["cells"][1]["source"]).strip()
    except (OSError, ValueError, KeyError, IndexError):
        return None


@pytest.fixture(scope="module")
def class_round(hub):
    """The whole round, once: release, three learners in the browser, collect, grade, return,
    export, then each learner's feedback and their tries at another's; what each step gave."""
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (make test does as root)")
    trio, homes = hub["names"], hub["homes"]
    answers = {trio[0]: RIGHT, trio[1]: CONSTANT, trio[2]: RIGHT}
    base = f"https://127.0.0.1:{hub['settings']['port']}/"
    course = tempfile.mkdtemp(prefix="course-", dir=hub["base"])  # the instructor's folder
    os.chmod(course, 0o700)
    common = ["--course", course, "--roster", hub["roster"], "--homes", homes]
    run = {"trio": trio, "answers": answers, "course": course, "seconds": {}, "ran": {}}
    mark = time.monotonic()
    run["class"] = {"release": class_cli("release", "ex02", *common)}
    run["seconds"]["release"] = time.monotonic() - mark
    began = time.monotonic()
    # the three servers start at once through the REST API (logging in starts them one by one)
    threads = [threading.Thread(target=hub["api"].start, args=(n,)) for n in trio]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    hub["api"].wait_ready(trio, timeout=300)  # as long as the spawner gives a server
    run["seconds"]["servers_3"] = time.monotonic() - began
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            pages = {}
            for name in trio:
                context = browser.new_context(
                    ignore_https_errors=True, viewport={"width": 1300, "height": 900}
                )
                pages[name] = context.new_page()
                _login(pages[name], base, name, hub["passwords"][name])
            run["seconds"]["login_3"] = time.monotonic() - began
            mark = time.monotonic()
            for name in trio:  # the three run at once: their 2-rank checks overlap
                _open_and_answer(pages[name], base, name, answers[name])
            for name in trio:
                run["ran"][name] = _finish_and_save(pages[name])
            notebook = {n: os.path.join(homes, n, "exercises", f"{EXERCISE}.ipynb") for n in trio}
            deadline = time.monotonic() + 60  # until each save has reached the disk
            while time.monotonic() < deadline and not all(
                _answer_cell(notebook[n]) == answers[n].strip() for n in trio
            ):
                time.sleep(0.5)
            run["saved"] = {n: json.load(open(notebook[n])) for n in trio}
            run["owners"] = {n: os.stat(notebook[n]).st_uid for n in trio}
            run["seconds"]["run_and_save_3"] = time.monotonic() - mark
            for step, argv in (
                ("collect", ["collect", "ex02", "--deadline", "2099-01-01T00:00"]),
                ("grade", ["grade", "ex02", "--jobs", "auto"]),
                ("return", ["return", "ex02"]),
                ("export", ["export"]),
            ):
                mark = time.monotonic()
                run["class"][step] = class_cli(*argv, *common)
                run["seconds"][step] = time.monotonic() - mark
            mark = time.monotonic()
            run["feedback"], run["refused"] = {}, {}
            for i, name in enumerate(trio):
                other = trio[(i + 1) % 3]
                page = pages[name]
                own = page.request.get(
                    f"{base}user/{name}/api/contents/feedback/{EXERCISE}.md"
                    "?type=file&format=text&content=1"  # (as a file: jupytext opens .md as notebooks)
                )
                run["feedback"][name] = (own.status, own.json().get("content", ""))
                attempts = {}
                for label, path in (
                    ("lab", f"user/{other}/lab"),
                    ("feedback", f"user/{other}/api/contents/feedback/{EXERCISE}.md?content=1"),
                    ("files", f"user/{other}/files/feedback/{EXERCISE}.md"),
                ):
                    response = page.goto(f"{base}{path}")
                    attempts[label] = (response.status, page.content())
                # the learner's own server cannot reach out of their home either
                escape = page.request.get(
                    f"{base}user/{name}/api/contents/..%2F{other}%2Ffeedback?content=1"
                )
                attempts["escape"] = (escape.status, escape.text())
                run["refused"][name] = attempts
            run["seconds"]["feedback_and_refusals_3"] = time.monotonic() - mark
        finally:
            browser.close()
    run["seconds"]["all"] = time.monotonic() - began
    print("class round (s): " + ", ".join(f"{k} {v:.1f}" for k, v in run["seconds"].items()))
    return run


def test_three_learners_log_in_run_exercise_2_on_two_ranks_and_save_in_their_homes(class_round):
    for name in class_round["trio"]:
        outputs = class_round["ran"][name]["outputs"]
        assert "Traceback" not in outputs[0], outputs
        saved = class_round["saved"][name]
        source = "".join(saved["cells"][1]["source"])
        assert source.strip() == class_round["answers"][name].strip()
        assert class_round["owners"][name] == pwd.getpwnam(name).pw_uid
    a, b, c = class_round["trio"]
    # the check ran global_mean on 2 MPI ranks: the constant's verdict quotes what the ranks returned
    constant = class_round["ran"][b]["outputs"][1]
    assert "0 of 4 points" in constant and "the ranks returned [2.5, 2.5]" in constant, constant
    for name in (a, c):
        checked = class_round["ran"][name]["outputs"][1]
        assert "all 3 checks passed (4/4 points)" in checked, checked


def test_release_collect_grade_return_run_for_the_whole_roster(hub, class_round):
    for step, proc in class_round["class"].items():
        assert proc.returncode == 0, (step, proc.stdout[-2000:] + proc.stderr[-2000:])
    course = class_round["course"]
    collected = json.load(open(os.path.join(course, "collected.json")))
    print(json.dumps(collected)[:600])
    rows = list(csv.DictReader(open(os.path.join(course, "scores.csv"))))
    assert sorted(r["username"] for r in rows) == sorted(hub["names"])
    points = {r["username"]: r[next(k for k in r if k.startswith("ex02"))] for r in rows}
    a, b, c = class_round["trio"]
    assert float(points[a]) == float(points[c]) > 0
    assert float(points[b]) <= float(points[a]) / 4  # a constant earns at most a quarter
    for name in hub["names"]:
        feedback = os.path.join(hub["homes"], name, "feedback", f"{EXERCISE}.md")
        assert os.stat(feedback).st_uid == pwd.getpwnam(name).pw_uid


def test_each_learner_reads_their_own_feedback_in_the_browser(class_round):
    for name in class_round["trio"]:
        status, text = class_round["feedback"][name]
        assert status == 200 and name in text, (status, text[:300])
        others = [n for n in class_round["trio"] if n != name]
        assert not any(n in text for n in others)


def test_a_learner_is_refused_another_learners_home_and_feedback(class_round):
    """Through the hub, in the browser; their kernels are refused another home by Unix permissions
    (test_hub.py's test_a_learner_cannot_read_another_learners_home)."""
    for name, attempts in class_round["refused"].items():
        for label, (status, body) in attempts.items():
            assert status in (400, 403, 404), (name, label, status, body[:300])
            assert "points" not in body.lower(), (name, label, body[:300])
