"""``%hvdlint``: ``hvdcourse-lint`` in a notebook (lesson: Converting a Keras MNIST script to Horovod).

After ``%load_ext hvdcourse.course.check.lint``:

* ``%hvdlint my_train.py`` (any arguments of the command, ``--run`` too) checks files;
* ``%hvdlint`` alone checks the code of the cells run so far, as one script, and names each
  finding by its cell, ``In[3]:2``;
* ``%%hvdlint`` on top of a cell checks that cell, after the cells run so far (their imports
  and names count), and shows that cell's lines.
"""

from __future__ import annotations

import shlex

from hvdcourse.course.check.lint.lint import Unreadable, lint_source, main
from hvdcourse.runtime.errors import CourseError, error_line


def lint_cells(cells: list, predefined=(), only: str | None = None) -> list:
    """Lint ``cells`` (``[(label, source)]``) as one script; each line names its cell and line
    (``only``: keep the lines of the cell with that label)."""
    text, starts = "", []
    for label, source in cells:
        starts.append((text.count("\n") + 1, label))
        text += source.rstrip("\n") + "\n"
    lines = []
    for item in lint_source(text, "<notebook>", predefined):
        start, label = max((s for s in starts if s[0] <= item.line), default=starts[0])
        if only is not None and label != only:
            continue
        where = f"{label}:{item.line - start + 1}:"
        lines.append(item.format().replace(f"<notebook>:{item.line}:", where, 1))
    return lines


def history(shell) -> list:
    """``[(label, source)]`` of the cells run so far (IPython's ``In``, less this one)."""
    cells = list((getattr(shell, "user_ns", {}) or {}).get("In", []))[1:-1]
    return [(f"In[{n}]", source) for n, source in enumerate(cells, 1) if source.strip()]


def hvdlint(line: str, cell: str | None = None, shell=None) -> None:
    """The magic: files (``%hvdlint FILE...``), this session's cells (``%hvdlint``), or this
    cell (``%%hvdlint``)."""
    try:
        if cell is not None:
            names = set(getattr(shell, "user_ns", {}) or {})
            # the earlier cells too, for their imports; only this cell's lines are shown
            report = lint_cells([*history(shell), ("cell", cell)], names, only="cell")
        elif line.strip():
            main(shlex.split(line))
            return
        else:
            code = history(shell)
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
