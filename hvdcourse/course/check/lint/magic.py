"""``%hvdlint``: ``hvdcourse-lint`` in a notebook (lesson: Converting a Keras MNIST script to Horovod).

After ``%load_ext hvdcourse.course.check.lint``:

* ``%hvdlint my_train.py`` (any arguments of the command, ``--run`` too) checks files;
* ``%hvdlint`` alone checks the code of the cells run so far, as one script, and names each
  finding by its cell, ``In[3]:2``;
* ``%%hvdlint`` on top of a cell checks that cell (the names earlier cells defined count as
  defined).
"""

from __future__ import annotations

import shlex

from hvdcourse.course.check.lint.lint import Unreadable, lint_source, main
from hvdcourse.runtime.errors import CourseError, error_line


def lint_cells(cells: list, predefined=()) -> list:
    """Lint ``cells`` (``[(label, source)]``) as one script; each line names its cell and line."""
    text, starts = "", []
    for label, source in cells:
        starts.append((text.count("\n") + 1, label))
        text += source.rstrip("\n") + "\n"
    lines = []
    for item in lint_source(text, "<notebook>", predefined):
        start, label = max((s for s in starts if s[0] <= item.line), default=starts[0])
        line = item.format().replace(
            f"<notebook>:{item.line}:", f"{label}:{item.line - start + 1}:", 1
        )
        lines.append(line)
    return lines


def hvdlint(line: str, cell: str | None = None, shell=None) -> None:
    """The magic: files (``%hvdlint FILE...``), this session's cells (``%hvdlint``), or this
    cell (``%%hvdlint``)."""
    try:
        if cell is not None:
            names = set(getattr(shell, "user_ns", {}) or {})
            report = lint_cells([("cell", cell)], names)
        elif line.strip():
            main(shlex.split(line))
            return
        else:
            history = list((getattr(shell, "user_ns", {}) or {}).get("In", []))[1:-1]
            code = [(f"In[{n}]", src) for n, src in enumerate(history, 1) if src.strip()]
            report = lint_cells(code) if code else []
    except Unreadable as err:
        print(str(err))
        return
    except CourseError as err:
        print(error_line(err))
        return
    except SystemExit:  # argparse's --help or a usage error, already printed
        return
    for text in report:
        print(text)


def register(ipython) -> None:
    """Register ``%hvdlint`` and ``%%hvdlint`` with ``ipython``."""

    def magic(line, cell=None):
        return hvdlint(line, cell, shell=ipython)

    ipython.register_magic_function(magic, "line_cell", "hvdlint")
