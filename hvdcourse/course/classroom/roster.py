"""The class's learners: the roster, each learner's home, and file work done as the learner
(lesson: Instructor guide).

The roster is a CSV or TSV file with a ``username`` column (other columns are ignored). A learner's home
is their Unix account's home directory, or ``HOMES/<username>`` with ``--homes HOMES``. When the command
runs as root and the account exists, everything in a learner's home is read and written by a child
process running as that learner: files are theirs, and a link they planted cannot make root read or
overwrite another file.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import pwd
import re
import stat
import traceback
from dataclasses import dataclass

from hvdcourse.runtime.errors import UsageError

USERNAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


@dataclass
class Learner:
    name: str
    home: str
    uid: int | None = None  # set when the work in the home must be done as this account
    gid: int | None = None


def read_roster(path: str) -> list:
    """The usernames of the roster at ``path``, in its order; :class:`UsageError` if it is unusable."""
    if not os.path.isfile(path):
        raise UsageError(
            f"no roster at {path}: write a CSV (or TSV) file with a 'username' column, one learner "
            "a line, or give its path with --roster"
        )
    with open(path, encoding="utf-8-sig", newline="") as fh:
        text = fh.read()
    first = text.splitlines()[0] if text.strip() else ""
    rows = list(csv.reader(text.splitlines(), delimiter="\t" if "\t" in first else ","))
    header = [h.strip().lower() for h in rows[0]] if rows else []
    if "username" not in header:
        raise UsageError(
            f"the roster {path} has no 'username' column (its first line is {first[:80]!r}); add a "
            "header line that names the column 'username'"
        )
    column, names = header.index("username"), []
    for number, row in enumerate(rows[1:], 2):
        name = row[column].strip() if len(row) > column else ""
        if not name:
            continue
        if not USERNAME.match(name):
            raise UsageError(
                f"{path}, line {number}: {name!r} is not a username (letters, digits, '_', '.', '-')"
            )
        if name in names:
            raise UsageError(f"{path}, line {number}: {name!r} is listed twice; keep one line")
        names.append(name)
    if not names:
        raise UsageError(f"the roster {path} lists no learner under 'username'")
    return names


def learners(names: list, homes: str | None = None) -> list:
    """:class:`Learner` for each name: home ``homes/<name>``, or the account's home directory
    (``home`` is '' for a name with no account and no ``homes``)."""
    found = []
    for name in names:
        try:
            account = pwd.getpwnam(name)
        except KeyError:
            account = None
        home = os.path.join(os.path.abspath(homes), name) if homes else ""
        if account is not None and not homes:
            home = account.pw_dir
        as_user = account is not None and os.geteuid() == 0
        found.append(
            Learner(
                name, home, account.pw_uid if as_user else None, account.pw_gid if as_user else None
            )
        )
    return found


def select(everyone: list, wanted: list | None, roster: str) -> list:
    """The learners named in ``wanted`` (all when it is empty); :class:`UsageError` for a name not on the roster."""
    if not wanted:
        return everyone
    by_name = {learner.name: learner for learner in everyone}
    unknown = [w for w in wanted if w not in by_name]
    if unknown:
        raise UsageError(
            f"unknown learner {', '.join(map(repr, unknown))}: the roster {roster} lists "
            f"{', '.join(sorted(by_name))[:300]}"
        )
    return [by_name[w] for w in wanted]


class LearnerFileError(Exception):
    """A learner's file could not be read or written; the message says why (one line)."""


def as_learner(learner: Learner, work, *args):
    """``work(*args)`` as the learner (a child process with their uid, gid and no other groups) when the
    command runs as root and the account exists, else here. ``work`` returns JSON data; an error it
    raises comes back as :class:`LearnerFileError`."""
    if learner.uid is None:
        try:
            return work(*args)
        except OSError as err:
            raise LearnerFileError(f"{err.strerror or err}: {err.filename or ''}".strip()) from None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the learner, do the work, send the outcome, exit
        code = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(learner.gid)
            os.setuid(learner.uid)
            os.umask(0o022)
            outcome = {"ok": work(*args)}
        except OSError as err:
            outcome = {"error": f"{err.strerror or err}: {err.filename or ''}".strip()}
        except BaseException as err:  # a bug: its last lines, for the parent to raise
            outcome = {"error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()}
        try:
            with os.fdopen(write_end, "w") as fh:
                json.dump(outcome, fh)
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as fh:
        text = fh.read()
    os.waitpid(pid, 0)
    outcome = json.loads(text) if text else {"error": "the process working as the learner died"}
    if "trace" in outcome:
        raise RuntimeError(outcome["trace"])
    if "error" in outcome:
        raise LearnerFileError(outcome["error"])
    return outcome["ok"]


def write_new(path: str, data_b64: str, mode: int) -> str:
    """Create ``path`` (and its folder) with the data; never replaces a file: 'exists' if one is there."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        return "exists"
    with os.fdopen(fd, "wb") as fh:
        fh.write(base64.b64decode(data_b64))
    return "written"


def replace_file(path: str, data_b64: str, mode: int) -> str:
    """Write ``path`` (and its folder) with the data, replacing a regular file there (never following a link)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    existed = os.path.lexists(path)
    if os.path.islink(path) or (existed and not os.path.isfile(path)):
        raise OSError(0, "not a regular file (a link or a folder), left as it is", path)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(base64.b64decode(data_b64))
    os.replace(tmp, path)
    return "replaced" if existed else "written"


def read_file(path: str, limit: int):
    """{'data': base64, 'mtime': seconds} of the regular file ``path`` (None if there is none); refuses
    a link, and a file over ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        if os.path.islink(path):
            raise OSError(0, "a link, not a notebook: not collected", path) from None
        raise err
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(0, "not a regular file: not collected", path)
        if info.st_size > limit:
            raise OSError(
                0, f"{info.st_size / 1e6:.0f} MB, over the {limit / 1e6:.0f} MB limit", path
            )
        data = fh.read(limit + 1)
    return {"data": base64.b64encode(data).decode(), "mtime": info.st_mtime}
