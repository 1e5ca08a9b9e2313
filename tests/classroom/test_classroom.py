"""hvdcourse-class on a class of three learners in temporary homes (--homes): release, collect, grade,
return, export, the written answers and the marks given by hand, bad input. The grading is real
(hvdcourse-grade): three notebooks of exercise 1 in the whole module, graded in one shared fixture.
One test runs as real Unix accounts (root only) to check who owns what lands in a home."""

import contextlib
import copy
import csv
import datetime
import io
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import ROOT
from hvdcourse.course.classroom import cli

SAMPLES = os.path.join(ROOT, "tests", "grading", "submissions")
EXERCISE = "ex01_collectives"
NOTEBOOK = EXERCISE + ".ipynb"
LEARNERS = ("ada", "ben", "cyd")
ANSWER = "Each rank's gradient is already a mean, so the mean of means keeps the step's scale."


def run(*argv) -> tuple:
    """(exit code, stdout, stderr) of ``hvdcourse-class argv`` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def new_class(root) -> dict:
    """A course folder with a roster of LEARNERS and an empty folder of homes under ``root``."""
    taken = [name for name in LEARNERS if name in {p.pw_name for p in pwd.getpwall()}]
    assert not taken, f"accounts {taken} exist here: the tests' learners must have none"
    course, homes = os.path.join(root, "course"), os.path.join(root, "homes")
    os.makedirs(course)
    with open(os.path.join(course, "roster.csv"), "w") as fh:
        fh.write("username,full name\n" + "".join(f"{n},{n.title()} Example\n" for n in LEARNERS))
    return {"course": course, "homes": homes, "opts": ("--course", course, "--homes", homes)}


def home_file(cls: dict, user: str, *parts) -> str:
    return os.path.join(cls["homes"], user, *parts)


def save_as_learner(cls: dict, user: str, sample: str, mtime: float, answer: str = "") -> None:
    """The learner's work: a sample submission (with a written answer) saved at ``mtime``."""
    with open(os.path.join(SAMPLES, sample, NOTEBOOK)) as fh:
        nb = json.load(fh)
    if answer:
        cell = next(c for c in nb["cells"] if "**Your answer" in "".join(c["source"]))
        text = "".join(cell["source"]).replace("_write it here_", answer)
        cell["source"] = text
        nb["cells"].append(
            {
                "cell_type": "markdown",
                "id": "mine-1",
                "metadata": {},
                "source": "And a second thought.",
            }
        )
    path = home_file(cls, user, "exercises", NOTEBOOK)
    with open(path, "w") as fh:
        json.dump(nb, fh)
    os.utime(path, (mtime, mtime))


def read_json(path: str):
    with open(path) as fh:
        return json.load(fh)


def gradebook(cls: dict) -> dict:
    return read_json(os.path.join(cls["course"], "gradebook.json"))["learners"]


def copy_class(cls: dict, root) -> dict:
    """A copy of the class (course folder and homes) for a test that changes it."""
    copied = {"course": os.path.join(root, "course"), "homes": os.path.join(root, "homes")}
    shutil.copytree(cls["course"], copied["course"])
    shutil.copytree(cls["homes"], copied["homes"])
    copied["opts"] = ("--course", copied["course"], "--homes", copied["homes"])
    return copied


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """ada hands in a correct notebook with a written answer before the deadline, ben a wrong one
    after it, cyd deletes hers; collected and graded (2 notebooks)."""
    cls = new_class(tmp_path_factory.mktemp("class"))
    now = datetime.datetime.now().astimezone()
    deadline = now - datetime.timedelta(hours=1)
    cls["release"] = run("release", "ex01", *cls["opts"])
    save_as_learner(
        cls, "ada", "alice", (deadline - datetime.timedelta(hours=1)).timestamp(), ANSWER
    )
    save_as_learner(cls, "ben", "bob", now.timestamp())
    os.remove(home_file(cls, "cyd", "exercises", NOTEBOOK))
    cls["collect"] = run("collect", "ex01", "--deadline", deadline.isoformat(), *cls["opts"])
    cls["grade"] = run("grade", "ex01", *cls["opts"])
    assert cls["grade"][0] == 0, cls["grade"]
    cls["book"] = copy.deepcopy(gradebook(cls))
    return cls


def test_release_copies_the_learner_notebook_into_three_homes(tmp_path):
    cls = new_class(tmp_path)
    code, out, _ = run("release", "ex01", *cls["opts"])
    assert code == 0 and "released to 3 learner(s)" in out
    with open(os.path.join(ROOT, "exercises", NOTEBOOK), "rb") as fh:
        learner_version = fh.read()
    for user in LEARNERS:
        with open(home_file(cls, user, "exercises", NOTEBOOK), "rb") as fh:
            assert fh.read() == learner_version  # the learner notebook, never the solution


def test_release_keeps_a_learners_existing_copy(tmp_path):
    cls = new_class(tmp_path)
    os.makedirs(home_file(cls, "ben", "exercises"))
    with open(home_file(cls, "ben", "exercises", NOTEBOOK), "w") as fh:
        fh.write("ben's work")
    code, out, _ = run("release", "ex01", *cls["opts"])
    assert code == 0 and "ben: kept their own" in out and "1 already had it" in out
    with open(home_file(cls, "ben", "exercises", NOTEBOOK)) as fh:
        assert fh.read() == "ben's work"


def test_collect_flags_a_late_notebook_and_records_who_submitted_nothing(graded):
    record = read_json(os.path.join(graded["course"], "collected.json"))[EXERCISE]["learners"]
    assert record["ada"]["late"] is False and record["ben"]["late"] is True
    assert record["cyd"]["status"] == "missing"
    assert "1 late" in graded["collect"][1] and "submitted nothing: cyd" in graded["collect"][1]
    for user in ("ada", "ben"):
        kept = os.path.join(graded["course"], "submitted", user, NOTEBOOK)
        home = home_file(graded, user, "exercises", NOTEBOOK)
        assert os.path.getmtime(kept) == os.path.getmtime(home)  # the saving time travels with it
        assert record[user]["mtime"] == datetime.datetime.fromtimestamp(
            os.path.getmtime(home)
        ).astimezone().isoformat(timespec="seconds")


def test_recollect_keeps_the_earlier_copy(tmp_path):
    cls = new_class(tmp_path)
    run("release", "ex01", *cls["opts"])
    assert run("collect", "ex01", *cls["opts"])[0] == 0
    first = os.path.join(cls["course"], "submitted", "ada", NOTEBOOK)
    with open(first) as fh:
        released = fh.read()
    save_as_learner(cls, "ada", "alice", datetime.datetime.now().timestamp())
    code, out, _ = run("collect", "ex01", *cls["opts"])
    assert code == 0 and "the earlier copy kept as archive/ada/" in out
    record = read_json(os.path.join(cls["course"], "collected.json"))[EXERCISE]["learners"]["ada"]
    with open(os.path.join(cls["course"], record["earlier"][0]["file"])) as fh:
        assert fh.read() == released
    with open(first) as fh:
        assert fh.read() != released
    assert "ben: unchanged since" in out


def test_grade_merges_each_learners_points_into_the_gradebook(graded):
    book = graded["book"]
    assert book["ada"][EXERCISE]["auto"]["points"] == 5 == book["ada"][EXERCISE]["auto"]["max"]
    assert book["ben"][EXERCISE]["auto"]["points"] < 5 and book["ben"][EXERCISE]["auto"]["late"]
    assert book["cyd"][EXERCISE]["auto"] == {
        "points": 0,
        "status": "not submitted",
        "graded_at": book["cyd"][EXERCISE]["auto"]["graded_at"],
    }
    assert "grading 2 notebook(s)" in graded["grade"][1]


def test_graded_notebooks_cannot_read_the_course_folder(graded):
    run_folder = graded["book"]["ada"][EXERCISE]["auto"]["run"]
    results = read_json(os.path.join(graded["course"], run_folder, "results", "results.json"))
    for (
        student
    ) in results:  # the other learners' notebooks, the gradebook: hidden like the solutions
        assert os.path.realpath(graded["course"]) in student["notebooks"][0]["hidden"]


def test_regrading_one_learner_leaves_the_other_rows_unchanged(graded, tmp_path):
    cls = copy_class(graded, tmp_path)
    save_as_learner(cls, "ben", "alice", datetime.datetime.now().timestamp())  # ben fixes it, late
    assert run("collect", "ex01", *cls["opts"])[0] == 0
    code, out, _ = run("grade", "ex01", "--learner", "ben", *cls["opts"])
    assert code == 0 and "grading 1 notebook(s)" in out
    book = gradebook(cls)
    assert book["ben"][EXERCISE]["auto"]["points"] == 5
    assert {u: book[u] for u in ("ada", "cyd")} == {u: graded["book"][u] for u in ("ada", "cyd")}
    code, out, _ = run("grade", *cls["opts"])  # nothing changed since: no grader run
    assert code == 0 and "nothing new to grade" in out and gradebook(cls) == book


def test_return_puts_each_learners_feedback_only_in_their_home(graded, tmp_path):
    cls = copy_class(graded, tmp_path)
    code, _, _ = run("return", *cls["opts"])
    assert code == 0
    for user in LEARNERS:
        folder = home_file(cls, user, "feedback")
        assert os.listdir(folder) == [EXERCISE + ".md"]
        with open(os.path.join(folder, EXERCISE + ".md")) as fh:
            text = fh.read()
        assert f"Feedback for {user}" in text
        assert not [other for other in LEARNERS if other != user and other in text]


def test_export_writes_one_row_per_learner_and_a_column_per_exercise(graded, tmp_path):
    out = tmp_path / "lms.csv"
    code, _, _ = run("export", "--out", out, *graded["opts"])
    assert code == 0
    with open(out) as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["username", EXERCISE, "total"]
    assert [r[0] for r in rows[1:]] == list(LEARNERS)
    assert rows[1] == ["ada", "5", "5"] and rows[3] == ["cyd", "0", "0"]


def test_answers_bundle_lists_each_learners_written_answer(graded, tmp_path):
    cls = copy_class(graded, tmp_path)
    code, out, _ = run("answers", "ex01", *cls["opts"])
    assert code == 0
    with open(os.path.join(cls["course"], "answers", EXERCISE, "q1.md")) as fh:
        text = fh.read()
    assert "> **Question.** MPI's `MPI_Allreduce`" in text
    ada, ben, cyd = (text.split(f"## {u}\n")[1].split("## ")[0] for u in LEARNERS)
    assert ANSWER in ada and "And a second thought." in ada and "Your answer" not in ada
    assert "(no answer)" in ben and "(no notebook collected)" in cyd
    with open(os.path.join(cls["course"], "answers", EXERCISE, "marks.csv")) as fh:
        assert [r["username"] for r in csv.DictReader(fh)] == list(LEARNERS)


def test_a_mark_by_hand_adds_to_the_points_and_the_returned_feedback(graded, tmp_path):
    cls = copy_class(graded, tmp_path)
    code, _, _ = run("mark", "ada", "ex01", "2", "--note", "clear", *cls["opts"])
    assert code == 0
    book = gradebook(cls)
    assert book["ada"][EXERCISE]["manual"]["q1"]["points"] == 2
    assert book["ada"][EXERCISE]["auto"] == graded["book"]["ada"][EXERCISE]["auto"]
    assert {u: book[u] for u in ("ben", "cyd")} == {u: graded["book"][u] for u in ("ben", "cyd")}
    run("export", *cls["opts"])
    with open(os.path.join(cls["course"], "scores.csv")) as fh:
        assert next(r for r in csv.DictReader(fh) if r["username"] == "ada")["total"] == "7"
    run("return", "--learner", "ada", *cls["opts"])
    with open(home_file(cls, "ada", "feedback", EXERCISE + ".md")) as fh:
        assert "Question 1: 2 point(s): clear" in fh.read()


def test_marks_from_a_csv_merge_into_the_gradebook(graded, tmp_path):
    cls = copy_class(graded, tmp_path)
    marks = tmp_path / "marks.csv"
    marks.write_text(
        "username,exercise,question,points,note\nben,ex01,q1,1,partly\ncyd,ex01,q1,,\n"
    )
    code, out, _ = run("mark", "--csv", marks, *cls["opts"])
    assert code == 0 and "merged 1 mark(s)" in out
    book = gradebook(cls)
    assert book["ben"][EXERCISE]["manual"]["q1"]["points"] == 1
    assert book["ada"] == graded["book"]["ada"] and book["cyd"] == graded["book"]["cyd"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (("release", "ex01", "--roster", "/nonexistent/roster.csv"), "no roster at"),
        (("release", "ex99"), "unknown exercise 'ex99'"),
        (("grade", "--learner", "zed"), "unknown learner 'zed'"),
        (("mark", "zed", "ex01", "1"), "unknown learner 'zed'"),
        (("mark", "ada", "ex01", "many"), "is not a number"),
        (("collect", "ex01", "--deadline", "friday"), "is not a date and time"),
        (("grade",), "nothing was collected"),
    ],
)
def test_bad_input_gets_one_clear_line(tmp_path, argv, message):
    cls = new_class(tmp_path)
    code, _, err = run(*argv, *cls["opts"])
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("hvdcourse: error: ") and message in err


def test_grading_an_exercise_never_collected_says_collect_it_first(graded):
    code, _, err = run("grade", "ex09", *graded["opts"])
    assert code == 2 and "ex09_scaling was never collected: run 'hvdcourse-class collect" in err


def test_the_command_line_entry_prints_no_traceback(tmp_path):
    cls = new_class(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "hvdcourse.course.classroom", "release", "nothing", *cls["opts"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("hvdcourse: error: unknown exercise 'nothing'")


@pytest.fixture
def accounts():
    """Two real Unix accounts with homes in a temporary folder, removed afterwards (root only)."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.fail(
            "the class tests make learners' Unix accounts: run them as root, with useradd (passwd)"
        )
    base = tempfile.mkdtemp(prefix="hvdcls-")
    os.chmod(base, 0o755)  # the learners must reach their homes
    names = [f"hvdcls{os.urandom(3).hex()}" for _ in range(2)]
    made = []
    try:
        for name in names:
            home = os.path.join(base, name)
            subprocess.run(["useradd", "-m", "-d", home, "-s", "/bin/sh", name], check=True)
            made.append(name)
        yield base, names
    finally:
        for name in made:
            subprocess.run(["userdel", "-r", name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def test_real_accounts_own_what_lands_in_their_homes(accounts, tmp_path):
    base, names = accounts
    course = tmp_path / "course"
    course.mkdir()
    (course / "roster.csv").write_text("username\n" + "\n".join(names) + "\n")
    secret = tmp_path / "root-only.txt"  # a learner's link to it must not be collected
    secret.write_text("root's secret")
    os.chmod(secret, 0o600)

    def hvdcourse_class(*argv):
        return subprocess.run(
            [sys.executable, "-m", "hvdcourse.course.classroom", *argv, "--course", str(course)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert hvdcourse_class("release", "ex01").returncode == 0
    owner, planter = (pwd.getpwnam(n) for n in names)
    released = os.path.join(owner.pw_dir, "exercises", NOTEBOOK)
    assert os.stat(released).st_uid == owner.pw_uid
    assert os.stat(os.path.dirname(released)).st_uid == owner.pw_uid
    planted = os.path.join(planter.pw_dir, "exercises", NOTEBOOK)
    os.remove(planted)
    os.symlink(str(secret), planted)
    collected = hvdcourse_class("collect", "ex01")
    assert "a link, not a notebook" in collected.stdout, collected.stdout + collected.stderr
    assert not os.path.exists(course / "submitted" / planter.pw_name)
    assert os.path.isfile(course / "submitted" / owner.pw_name / NOTEBOOK)
    os.makedirs(course / "feedback" / owner.pw_name)
    (course / "feedback" / owner.pw_name / (EXERCISE + ".md")).write_text("# Feedback\n")
    assert hvdcourse_class("mark", owner.pw_name, "ex01", "1").returncode == 0
    assert hvdcourse_class("return", "--learner", owner.pw_name).returncode == 0
    returned = os.path.join(owner.pw_dir, "feedback", EXERCISE + ".md")
    assert os.stat(returned).st_uid == owner.pw_uid and os.stat(returned).st_mode & 0o777 == 0o600
