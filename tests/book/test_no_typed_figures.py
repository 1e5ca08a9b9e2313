"""Measured figures reach the book's prose only through glue or committed data, never typed.

A number with a unit of time, rate or share (ms, s, img/s, %, GB/s, a speed-up "1.8x") in the prose
of a page (code cells, inline code, math, roles such as {glue:text} and {execution-time}, and links
left out) is either computed by the page or read from book/data, or it is a constant listed below
with why it is one. A figure that a run or a model gives must be glued; adding it here is wrong.
"""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = sorted(
    f"notebooks/{name}"
    for name in os.listdir(os.path.join(ROOT, "notebooks"))
    if name.endswith(".md")
)
PAGES += ["book/intro.md", "book/instructor_guide.md"]

UNIT = r"(?:img/s|images/s|samples/s|ms|µs|s|seconds|%|MB/s|GB/s|GiB/s|Gbit/s|Gb/s|TB/s|x(?!\s*\d)|×(?!\s*\d))"
FIGURE = re.compile(r"(?<![\w.$/-])(\d+(?:[.,]\d+)*)\s?(" + UNIT + r")(?![\w/])")

# Constants, by page: each is a specification, a default or a setting, or a figure quoted from a
# source document with its source named in the sentence; none is a result of this course's runs.
CONSTANTS = {
    # LUMI-G and Grace-Hopper node specifications (vendor and centre documentation); "40 %" is the
    # stated assumption of the training-time estimate
    "notebooks/01_why_distributed.md": {
        "200 Gb/s",
        "36 GB/s",
        "25 GB/s",
        "800 Gb/s",
        "1.6 TB/s",
        "900 GB/s",
        "450 GB/s",
        "40 %",
    },
    # the Slingshot-11 link of the cost model's example; the line rate of InfiniBand HDR and the two
    # latencies quoted with their sources (WWT's Ethernet kernel-to-kernel, Microsoft's HBv3 RDMA)
    "notebooks/03_allreduce.md": {"25 GB/s", "200 Gb/s", "50 µs", "1.2 µs"},
    # Horovod's defaults (cycle time) and the course's stall-check settings
    "notebooks/04_horovod_design.md": {"1 ms", "20 s", "60 s"},
    # the cycle-time default, old default and the setting the page runs; "8 ms" is arithmetic (8 x 1 ms)
    "notebooks/06_timeline.md": {"1 ms", "5 ms", "10 ms", "8 ms"},
    # defaults and settings (cycle time, monitor period), quoted published figures (88 % from the
    # Horovod paper, 1.2x from the Ray talk, 10 and 25 Gbit/s of their clusters), "2 x one core" and
    # "100 % busy" as concepts
    "notebooks/07_performance.md": {
        "1 ms",
        "0.1 ms",
        "0.25 s",
        "88 %",
        "1.2 x",
        "10 Gbit/s",
        "25 Gbit/s",
        "2 x",
        "100 %",
    },
    # the fault tests' bounds and stall-check settings, and the Slurm signal's lead time
    "notebooks/11_fault_tolerance.md": {"30 s", "60 s", "5 s", "15 s", "120 s"},
}


def prose(text: str) -> str:
    """The page's text as a reader sees it typed: no front matter, code, math, roles or link targets."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = re.sub(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1\s*$", "", text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", "", text)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", "", text)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    # planned, not measured
    return re.sub(r"\*\*Time\*\*: teaching \d+ min, exercises \d+ min", "", text)


def typed_figures(text: str) -> list:
    return [f"{number} {unit}" for number, unit in FIGURE.findall(prose(text))]


@pytest.mark.parametrize("page", PAGES)
def test_page_types_no_measured_figure(page):
    typed = typed_figures(open(os.path.join(ROOT, page)).read())
    unexplained = sorted({figure for figure in typed} - CONSTANTS.get(page, set()))
    assert not unexplained, (
        f"{page} types {unexplained}: glue them from the cell or the book/data file "
        "that produced them (or, for a constant, list it in CONSTANTS with why)"
    )


def test_every_listed_constant_is_still_on_its_page():
    for page, constants in CONSTANTS.items():
        typed = set(typed_figures(open(os.path.join(ROOT, page)).read()))
        assert constants <= typed, (
            f"{page}: {sorted(constants - typed)} are gone; drop them from CONSTANTS"
        )


def test_the_scan_sees_a_typed_figure_and_ignores_glued_and_coded_ones():
    page = (
        "A run took 42 s and 1,234.5 img/s (85%).\n\n"
        "Glued: {glue:text}`speed:.0f` img/s, in code `3 s`, in math $2 x$.\n\n"
        "```{code-cell} ipython3\nprint('9 ms')\n```\n"
    )
    assert typed_figures(page) == ["42 s", "1,234.5 img/s", "85 %"]
