"""Solution markers: one source, a learner version and a solution version.

Like nbgrader's *clearsolutions*: in a code or markdown cell, the lines between ``### BEGIN SOLUTION``
and ``### END SOLUTION`` are the solution. :func:`clear_solutions` replaces each region by a
placeholder (indented like the marker); :func:`strip_markers` keeps the region and drops the marker
lines. An optional note after the marker (``### BEGIN SOLUTION: write the ring allreduce here``)
becomes the placeholder's message. Malformed markers (nested, unterminated, unmatched, misspelt)
raise :class:`MarkerError` naming the place, so a solution can never leak into a learner notebook.

Pure functions on strings: no files, no notebooks.
"""

from __future__ import annotations

import json
import re

from hvdcourse.runtime.errors import UsageError

BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
# anything that looks like a marker: caught even when misspelt ("## BEGIN SOLUTON", "### end solution")
_LOOKS_LIKE_MARKER = re.compile(r"^\s*#+\s*(BEGIN|END)\s+SOL", re.IGNORECASE)
_BEGIN = re.compile(r"^(?P<indent>\s*)### BEGIN SOLUTION(?:\s*:\s*(?P<note>\S.*?))?\s*$")
_END = re.compile(r"^\s*### END SOLUTION\s*$")
CODE_PLACEHOLDER = "raise NotImplementedError({message})"
MARKDOWN_PLACEHOLDER = "**Your answer ({label}):** _{note}_"
DEFAULT_CODE_NOTE = "replace this line with your code"
DEFAULT_MARKDOWN_NOTE = "write it here"


class MarkerError(UsageError):
    """Malformed solution markers; the message says where and how to fix them (exit code 2)."""


def find_regions(source: str, where: str = "cell") -> list:
    """Return ``(begin_line, end_line, indent, note)`` for each region (0-based line numbers).

    Raises :class:`MarkerError` on a nested, unterminated, unmatched or misspelt marker.
    """
    regions, open_region = [], None
    for number, line in enumerate(source.splitlines()):
        begin, end = _BEGIN.match(line), _END.match(line)
        if not (begin or end):
            if _LOOKS_LIKE_MARKER.match(line):
                raise MarkerError(
                    f"{where}, line {number + 1}: malformed marker {line.strip()!r}; "
                    f"write exactly '{BEGIN}' or '{END}'"
                )
            continue
        if begin:
            if open_region is not None:
                raise MarkerError(
                    f"{where}, line {number + 1}: '{BEGIN}' inside the region opened on "
                    f"line {open_region[0] + 1}; regions cannot be nested, close it first"
                )
            open_region = (number, begin.group("indent"), begin.group("note"))
        else:
            if open_region is None:
                raise MarkerError(
                    f"{where}, line {number + 1}: '{END}' without a '{BEGIN}' before it"
                )
            regions.append((open_region[0], number, open_region[1], open_region[2]))
            open_region = None
    if open_region is not None:
        raise MarkerError(
            f"{where}, line {open_region[0] + 1}: '{BEGIN}' is never closed; "
            f"add '{END}' after the solution"
        )
    return regions


def clear_solutions(
    source: str, cell_type: str = "code", label: str = "Exercise", where: str = "cell"
) -> str:
    """The learner version of a cell: each solution region becomes one placeholder line.

    Code: ``raise NotImplementedError("<label>: <note>")``; markdown: a bold "Your answer" line.
    """
    regions = find_regions(source, where)
    if not regions:
        return source
    lines = source.splitlines()
    out, cursor = [], 0
    for begin, end, indent, note in regions:
        out.extend(lines[cursor:begin])
        if cell_type == "code":
            message = json.dumps(f"{label}: {note or DEFAULT_CODE_NOTE}", ensure_ascii=False)
            out.append(indent + CODE_PLACEHOLDER.format(message=message))
        else:
            out.append(
                indent
                + MARKDOWN_PLACEHOLDER.format(label=label, note=note or DEFAULT_MARKDOWN_NOTE)
            )
        cursor = end + 1
    out.extend(lines[cursor:])
    return "\n".join(out)


def strip_markers(source: str, where: str = "cell") -> str:
    """The solution version of a cell: the regions stay, the marker lines go."""
    regions = find_regions(source, where)
    if not regions:
        return source
    drop = {n for begin, end, _, _ in regions for n in (begin, end)}
    return "\n".join(line for n, line in enumerate(source.splitlines()) if n not in drop)
