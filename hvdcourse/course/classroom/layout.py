"""The instructor's course folder and the exercises a class can be given (lesson: Instructor guide).

Only the generated learner notebooks (``exercises/exNN_name.ipynb``) can be released: an exercise is
named by its id (``ex01``), its notebook's name (``ex01_collectives``) or file name.
"""

from __future__ import annotations

import datetime
import json
import os

from hvdcourse.course.exercises import paths
from hvdcourse.runtime.errors import UsageError


def exercise_notebooks() -> dict:
    """{notebook name without .ipynb: path} of every generated learner notebook."""
    names = sorted(
        f[: -len(".ipynb")]
        for f in os.listdir(paths.EXERCISES_DIR)
        if f.startswith("ex") and f.endswith(".ipynb")
    )
    return {name: os.path.join(paths.EXERCISES_DIR, name + ".ipynb") for name in names}


def resolve_exercise(name: str) -> str:
    """The notebook name (``ex01_collectives``) of ``name`` (``ex01``, ``ex01_collectives`` or
    ``ex01_collectives.ipynb``); :class:`UsageError` if no learner notebook has that name."""
    known = exercise_notebooks()
    wanted = os.path.basename(str(name)).removesuffix(".ipynb")
    matches = [n for n in known if n == wanted or n.split("_", 1)[0] == wanted]
    if len(matches) != 1:
        raise UsageError(
            f"unknown exercise {name!r}: give one of {', '.join(n.split('_', 1)[0] for n in known)} "
            f"(or a notebook's name, e.g. {next(iter(known), 'ex01_collectives')})"
        )
    return matches[0]


def learner_notebook(exercise: str) -> bytes:
    """The bytes of the learner notebook of ``exercise`` (checked: the learner version, no solution)."""
    path = exercise_notebooks()[exercise]
    with open(path, "rb") as fh:
        data = fh.read()
    version = json.loads(data).get("metadata", {}).get("hvdcourse", {}).get("version")
    if version != "learner":
        raise UsageError(
            f"{path} is not a learner notebook (version {version!r}); regenerate the exercises "
            "(python -m hvdcourse.course.exercises.generate) before releasing"
        )
    return data


def now() -> datetime.datetime:
    return datetime.datetime.now().astimezone().replace(microsecond=0)


def stamp(moment: datetime.datetime) -> str:
    """A timestamp for file names: 20261126T131500."""
    return moment.strftime("%Y%m%dT%H%M%S")


def parse_time(text: str) -> datetime.datetime:
    """An ISO date and time (``2026-11-27T18:00``, local time unless it names a zone)."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--deadline {text!r} is not a date and time; write it as 2026-11-27T18:00 (local time) "
            "or 2026-11-27T18:00+01:00"
        ) from None
    return moment.astimezone() if moment.tzinfo is None else moment


class Course:
    """The paths of an instructor's course folder (created private: mode 700)."""

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.submitted = os.path.join(self.root, "submitted")
        self.archive = os.path.join(self.root, "archive")
        self.grading = os.path.join(self.root, "grading")
        self.feedback = os.path.join(self.root, "feedback")
        self.answers = os.path.join(self.root, "answers")
        self.collected_file = os.path.join(self.root, "collected.json")
        self.gradebook_file = os.path.join(self.root, "gradebook.json")

    def make(self) -> None:
        """Create the folder; learners' code run by the grader (as its own users) cannot enter it."""
        if not os.path.isdir(self.root):
            os.makedirs(self.root, mode=0o700)
            os.chmod(self.root, 0o700)

    def feedback_file(self, user: str, exercise: str) -> str:
        return os.path.join(self.feedback, user, exercise + ".md")

    def read(self, path: str, empty):
        """The JSON data in ``path`` (``empty`` if there is none yet)."""
        if not os.path.isfile(path):
            return empty
        try:
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)
        except ValueError as err:
            raise UsageError(
                f"{path} is not valid JSON ({err}); restore it from a backup or fix it by hand"
            ) from None

    def write(self, path: str, data) -> None:
        """Write ``data`` as JSON, atomically (a crash never leaves half a file)."""
        self.make()
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
