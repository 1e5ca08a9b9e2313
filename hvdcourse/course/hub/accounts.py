"""The class hub's learner accounts, made from the instructor's roster (lesson: Instructor guide).

The roster is the one ``hvdcourse-class`` reads (:func:`hvdcourse.course.classroom.roster.read_roster`:
a CSV or TSV file with a ``username`` column). For each name:

- the Unix account is made once (``useradd -m``, home mode 700, so no learner reads another's home),
  with a random first password that is written to the instructor's ``passwords.csv`` (mode 600) in
  the hub's state folder; an account that exists already is kept as it is, password and home included
  (a name of a system account, uid below 1000, is refused: the hub would let it log in);
- the learner material is copied into the home once, as the learner: the lessons into ``lessons/``
  and the learner notebooks of the exercises into ``exercises/`` (the folder ``hvdcourse-class
  release`` fills); never the solutions, and never over a file the learner already has.

Running it again makes nothing twice. At the end of the course, :func:`remove` takes a learner's
account away again: their processes ended, their home archived (a ``.tar.gz`` for the instructor) or
deleted, their Unix account deleted.
"""

from __future__ import annotations

import base64
import csv
import glob
import os
import pwd
import secrets
import subprocess
import time

from hvdcourse.course.classroom import roster
from hvdcourse.runtime import processes
from hvdcourse.runtime.errors import RunFailed, UsageError
from hvdcourse.runtime.paths import ROOT

FIRST_UID = 1000  # below: system accounts, never a learner
LESSONS = ("notebooks", "lessons")  # (folder in the clone, folder in the home)
EXERCISES = ("exercises", "exercises")


def material(root: str = ROOT) -> list:
    """``[(path in the clone, path relative to a home)]`` of the learner material: lesson pages and
    learner notebooks; nothing from ``solutions/``."""
    found = []
    for (folder, target), pattern in ((LESSONS, "*.md"), (EXERCISES, "ex*.ipynb")):
        for path in sorted(glob.glob(os.path.join(root, folder, pattern))):
            found.append((path, os.path.join(target, os.path.basename(path))))
    if not found:
        raise UsageError(f"no lessons or exercises found under {root}: is it the course's clone?")
    return found


def check_names(names: list) -> None:
    """:class:`UsageError` if a roster name is a system account (uid below 1000) or root's."""
    for name in names:
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            continue
        if account.pw_uid < FIRST_UID:
            raise UsageError(
                f"the roster names {name!r}, a system account (uid {account.pw_uid}): the hub "
                "would let it log in; take it off the roster"
            )


def _run(argv: list, what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RunFailed(f"{what} failed: {' '.join(argv[:1])}: {proc.stderr.strip()[-300:]}")


def create(name: str, homes: str | None = None) -> str:
    """Make the account ``name`` (home ``homes/<name>`` or the system default, mode 700) with a
    random password; returns the password."""
    argv = ["useradd", "-m", "-s", "/bin/bash", "-K", "HOME_MODE=0700", "-K", "UMASK=077"]
    if homes:
        argv += ["-d", os.path.join(os.path.abspath(homes), name)]
    _run(argv + [name], f"making the account {name!r}")
    password = secrets.token_urlsafe(9)
    proc = subprocess.run(
        ["chpasswd"], input=f"{name}:{password}\n", capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0:
        raise RunFailed(f"setting {name!r}'s password failed: {proc.stderr.strip()[-300:]}")
    os.chmod(pwd.getpwnam(name).pw_dir, 0o700)
    return password


def _copy_in(home: str, files: list) -> dict:
    """As the learner: each ``(relative path, base64 data)`` written into ``home`` unless a file is
    there. Returns ``{'written': n, 'kept': m}``."""
    counts = {"written": 0, "kept": 0}
    for relative, data in files:
        outcome = roster.write_new(os.path.join(home, relative), data, 0o644)
        counts["kept" if outcome == "exists" else "written"] += 1
    return counts


def give_material(name: str, root: str = ROOT) -> dict:
    """Copy the learner material into ``name``'s home as that learner (never over their files)."""
    learner = roster.learners([name])[0]
    files = []
    for path, relative in material(root):
        with open(path, "rb") as fh:
            files.append((relative, base64.b64encode(fh.read()).decode()))
    try:
        return roster.as_learner(learner, _copy_in, learner.home, files)
    except roster.LearnerFileError as err:
        raise RunFailed(f"copying the course into {name}'s home failed: {err}") from None


def ensure(names: list, passwords_file: str, homes: str | None = None) -> dict:
    """Accounts and material for every roster name; returns ``{'created': [...], 'existing': [...]}``.
    New accounts' first passwords are added to ``passwords_file`` (CSV, mode 600)."""
    check_names(names)
    created, existing = [], []
    for name in names:
        try:
            pwd.getpwnam(name)
            existing.append(name)
        except KeyError:
            password = create(name, homes)
            created.append(name)
            new_file = not os.path.exists(passwords_file)
            fd = os.open(passwords_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "w", newline="") as fh:
                writer = csv.writer(fh, lineterminator="\n")
                if new_file:
                    writer.writerow(["username", "first_password"])
                writer.writerow([name, password])
        give_material(name)
    return {"created": created, "existing": existing}


def archive_home(name: str, home: str, folder: str) -> str:
    """``folder/<name>-<time>.tar.gz`` of ``home`` (mode 600, in a folder only its owner enters)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    out = os.path.join(os.path.abspath(folder), f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.tar.gz")
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    parent, base = os.path.split(home.rstrip(os.sep))
    proc = subprocess.run(
        ["tar", "-czf", out, "-C", parent, base], capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        os.remove(out)
        raise RunFailed(
            f"archiving {name}'s home {home} failed, nothing was deleted: {proc.stderr[-300:]}"
        )
    return out


def remove(name: str, archive: str | None = None) -> dict:
    """Remove the learner account ``name``: end its processes, archive its home into the folder
    ``archive`` (None: delete the home unarchived), delete the account and its home.
    Returns ``{'archive': path or None, 'ended': number of processes ended}``."""
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise UsageError(
            f"there is no account {name!r} on this machine: nothing to remove"
        ) from None
    if account.pw_uid < FIRST_UID:
        raise UsageError(f"{name!r} is a system account (uid {account.pw_uid}): never removed")
    running = processes.owned_by(account.pw_uid)
    processes.end(running, grace=5)
    processes.end_all(lambda: processes.owned_by(account.pw_uid))
    saved = archive_home(name, account.pw_dir, archive) if archive else None
    _run(["userdel", "-r", name], f"deleting the account {name!r}")
    if os.path.exists(account.pw_dir):  # userdel -r leaves a home it does not think is the user's
        raise RunFailed(f"the account {name!r} is deleted but its home {account.pw_dir} is left")
    return {"archive": saved, "ended": len(running)}


def forget_password(passwords_file: str, name: str) -> None:
    """Drop ``name``'s row from the instructor's first passwords (if there)."""
    try:
        with open(passwords_file, newline="") as fh:
            rows = list(csv.reader(fh))
    except OSError:
        return
    kept = [row for row in rows if not row or row[0] != name]
    if kept != rows:
        tmp = f"{passwords_file}.tmp{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", newline="") as fh:
            csv.writer(fh, lineterminator="\n").writerows(kept)
        os.replace(tmp, passwords_file)
