"""Release an exercise into the learners' homes, collect their notebooks, return their feedback
(lesson: Instructor guide).

A learner's work is never lost: release never replaces a file in a home, and a re-collect that finds
a changed notebook moves the earlier collected copy to ``archive/`` before keeping the new one.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import os

from hvdcourse.course.classroom import layout, roster
from hvdcourse.course.classroom.roster import LearnerFileError, as_learner

NOTEBOOK_LIMIT = 50_000_000  # bytes: a bigger "notebook" is not collected
FEEDBACK = "feedback"  # the folder of the returned feedback, in each learner's home


def home_problem(learner, homes_mode: bool) -> str:
    """'' when the learner's home is ready (with ``--homes`` it is made, owned by the account if any)."""
    if not learner.home:
        return f"no Unix account {learner.name!r}: create it (useradd -m {learner.name}) or give --homes"
    if os.path.isdir(learner.home):
        return ""
    if not homes_mode:
        return f"the home {learner.home} does not exist"
    os.makedirs(learner.home)
    if learner.uid is not None:
        os.chown(learner.home, learner.uid, learner.gid)
    return ""


def release(learners: list, exercise: str, folder: str, homes_mode: bool) -> int:
    """Copy the learner notebook of ``exercise`` to HOME/folder/ of each learner; returns the number of
    learners it could not reach."""
    data = base64.b64encode(layout.learner_notebook(exercise)).decode()
    name, failed, counts = exercise + ".ipynb", 0, {"written": 0, "exists": 0}
    for learner in learners:
        problem = home_problem(learner, homes_mode)
        path = os.path.join(learner.home, folder, name)
        if not problem:
            try:
                outcome = as_learner(learner, roster.write_new, path, data, 0o644)
            except LearnerFileError as err:
                problem = str(err)
        if problem:
            failed += 1
            print(f"{learner.name}: NOT released: {problem}", flush=True)
            continue
        counts[outcome] += 1
        if outcome == "exists":
            print(f"{learner.name}: kept their own {path} (a release never overwrites)", flush=True)
        else:
            print(f"{learner.name}: released {path}", flush=True)
    print(
        f"{exercise}: released to {counts['written']} learner(s), {counts['exists']} already had it"
        + (f", {failed} not reached" if failed else ""),
        flush=True,
    )
    return failed


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")


def _sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _archive(course, user: str, exercise: str, record: dict) -> dict:
    """Move the collected copy of ``user`` to archive/; return what the record keeps of it."""
    source = os.path.join(course.submitted, user, exercise + ".ipynb")
    when = record.get("collected_at") or _iso(os.path.getmtime(source))
    folder = os.path.join(course.archive, user)
    os.makedirs(folder, exist_ok=True)
    base = os.path.join(folder, f"{exercise}.{layout.stamp(layout.parse_time(when))}")
    target, n = base + ".ipynb", 1
    while os.path.exists(target):
        n += 1
        target = f"{base}-{n}.ipynb"
    os.replace(source, target)
    kept = {k: record.get(k) for k in ("mtime", "collected_at", "late", "sha256")}
    return dict(kept, file=os.path.relpath(target, course.root))


def collect(course, learners: list, exercise: str, folder: str, deadline=None) -> int:
    """Copy each learner's HOME/folder/<exercise>.ipynb to COURSE/submitted/<user>/, with its saving
    time and a late flag, into ``collected.json``; returns the number of learners it could not read."""
    course.make()
    records = course.read(course.collected_file, {})
    entry = records.setdefault(exercise, {"deadline": None, "learners": {}})
    if deadline is not None:
        entry["deadline"] = deadline.isoformat()
    due = layout.parse_time(entry["deadline"]) if entry.get("deadline") else None
    name, now, failed = exercise + ".ipynb", layout.now().isoformat(), 0
    counts, missing = {"collected": 0, "late": 0, "unchanged": 0}, []
    for learner in learners:
        previous = entry["learners"].get(learner.name, {})
        path = os.path.join(learner.home, folder, name) if learner.home else ""
        problem = "" if learner.home else home_problem(learner, False)
        got = None
        if not problem and os.path.isdir(learner.home):
            try:
                got = as_learner(learner, roster.read_file, path, NOTEBOOK_LIMIT)
            except LearnerFileError as err:
                problem = str(err)
        if problem:
            failed += 1
            print(f"{learner.name}: NOT collected: {problem}", flush=True)
        if got is None:
            missing.append(learner.name)
            if previous.get("status") == "collected":
                previous["absent_at"] = now
                print(
                    f"{learner.name}: no notebook now; the copy collected at "
                    f"{previous['collected_at']} stays",
                    flush=True,
                )
            else:
                entry["learners"][learner.name] = {
                    "status": "missing",
                    "checked_at": now,
                    **({"problem": problem} if problem else {}),
                }
            continue
        data = base64.b64decode(got["data"])
        digest = hashlib.sha256(data).hexdigest()
        late = (layout.parse_time(_iso(got["mtime"])) > due) if due else None
        dest = os.path.join(course.submitted, learner.name, name)
        earlier = list(previous.get("earlier", []))
        if os.path.isfile(dest) and _sha256(dest) == digest:
            previous.update(status="collected", checked_at=now, late=late)
            previous.pop("absent_at", None)
            counts["unchanged"] += 1
            print(f"{learner.name}: unchanged since {previous.get('collected_at')}", flush=True)
            continue
        if os.path.isfile(dest):
            earlier.append(_archive(course, learner.name, exercise, previous))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        tmp = dest + ".part"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.utime(tmp, (got["mtime"], got["mtime"]))
        os.replace(tmp, dest)
        entry["learners"][learner.name] = {
            "status": "collected",
            "notebook": os.path.relpath(dest, course.root),
            "mtime": _iso(got["mtime"]),
            "collected_at": now,
            "late": late,
            "sha256": digest,
            "earlier": earlier,
        }
        counts["collected"] += 1
        counts["late"] += bool(late)
        again = f" (the earlier copy kept as {earlier[-1]['file']})" if earlier else ""
        print(
            f"{learner.name}: collected, saved {_iso(got['mtime'])}"
            + (" LATE" if late else "")
            + again,
            flush=True,
        )
    course.write(course.collected_file, records)
    print(
        f"{exercise}: collected {counts['collected']} ({counts['late']} late), "
        f"{counts['unchanged']} unchanged, {len(missing)} submitted nothing"
        + (f": {', '.join(missing)}" if missing else ""),
        flush=True,
    )
    return failed


def give_back(learners: list, exercises: list, compose) -> int:
    """Write each learner's feedback of ``exercises`` to HOME/feedback/<exercise>.md (only theirs,
    owned by them); ``compose(user, exercise)`` returns the text, or None when there is none.
    Returns the number of learners it could not reach."""
    failed = 0
    for learner in learners:
        texts = {ex: compose(learner.name, ex) for ex in exercises}
        texts = {ex: text for ex, text in texts.items() if text is not None}
        if not texts:
            print(f"{learner.name}: no feedback yet (grade first)", flush=True)
            continue
        problem = home_problem(learner, False)
        for ex, text in texts.items():
            if problem:
                break
            path = os.path.join(learner.home, FEEDBACK, ex + ".md")
            data = base64.b64encode(text.encode()).decode()
            try:
                as_learner(learner, roster.replace_file, path, data, 0o600)
            except LearnerFileError as err:
                problem = str(err)
                break
            print(f"{learner.name}: returned {path}", flush=True)
        if problem:
            failed += 1
            print(f"{learner.name}: feedback NOT returned: {problem}", flush=True)
    return failed
