"""The ring allreduce step by step, drawn from :func:`hvdcourse.course.lessons.ring.ring_trace`
(lesson: Parameter servers and ring-allreduce).

One panel per communication step, 2(N-1) in all: rows are ranks, columns are chunks; a cell names
the ranks whose data that rank's copy of the chunk contains after the step ("0+2+3"; "Σ" once it
is the complete sum of all N), its colour says how many of the N contributions it holds, and the cell each rank
received at that step is outlined. The row label says which chunk the rank sent to its right
neighbour. Nothing is drawn by hand: the labels, colours and outlines all come from the trace and
the schedule, so the figure changes if the algorithm does.
"""

from __future__ import annotations

from hvdcourse.course.lessons import ring


def step_panels(size: int = 4) -> list:
    """What each panel shows: one dict per step of the ring on ``size`` ranks.

    Keys: ``title`` (the trace's label, e.g. "reduce-scatter step 1"), ``sends`` (``sends[r]``: the
    chunk rank r sends to rank r+1 at this step), ``received`` (``received[r]``: the chunk rank r
    receives and adds, or overwrites), ``cells`` (``cells[r][c]``: what rank r holds of chunk c after
    the step, "0+1" for a partial sum, "Σ" for the complete one) and ``counts`` (the number of contributions in each cell).
    """
    schedule = ring.ring_schedule(size)
    panels = []
    for label, table in ring.ring_trace(size)[1:]:
        phase, _, step = label.rpartition(" step ")
        moves = sorted(
            (s for s in schedule if s["phase"] == phase and s["step"] == int(step) - 1),
            key=lambda s: s["rank"],
        )
        panels.append(
            {
                "title": label,
                "sends": [s["send"] for s in moves],
                "received": [s["recv"] for s in moves],
                "cells": [[_label(cell, size) for cell in row] for row in table],
                "counts": [[len(cell) for cell in row] for row in table],
            }
        )
    return panels


def _label(cell: tuple, size: int) -> str:
    return "Σ" if len(cell) == size else "+".join(map(str, cell))


def plot_ring_steps(size: int = 4):
    """A matplotlib figure with one panel per step (2(N-1)) of the ring allreduce on ``size`` ranks.

    Each panel is a ranks x chunks grid: the text is what the rank holds of the chunk after the step,
    the colour how many ranks' data it contains (pale: partial sum, green and "Σ": complete), the thick
    outline the chunk the rank just received; the row label names the chunk the rank sent.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Rectangle

    panels = step_panels(size)
    if not panels:
        raise ValueError(f"a ring of {size} rank(s) has no communication step; use 2 or more")
    columns = size - 1  # reduce-scatter steps on the first row, allgather steps on the second
    fig, axes = plt.subplots(
        2, columns, figsize=(3.2 * columns + 0.8, 2 * (0.55 * size + 1.1)), squeeze=False
    )
    shades = ListedColormap(
        ["#fdebd0", "#fad7a0", "#f8c471", "#f5b041", "#eb984e"][: max(size - 1, 1)] + ["#82e0aa"]
    )
    for ax, panel in zip(axes.flat, panels):
        grid = [[min(n, size) for n in row] for row in panel["counts"]]
        ax.imshow(grid, cmap=shades, vmin=1, vmax=size, aspect="auto")
        for r in range(size):
            for c in range(size):
                complete = panel["counts"][r][c] == size
                ax.text(
                    c,
                    r,
                    panel["cells"][r][c],
                    ha="center",
                    va="center",
                    fontsize=11 if complete else 8,
                    fontweight="bold" if complete else "normal",
                )
            ax.add_patch(
                Rectangle(
                    (panel["received"][r] - 0.5, r - 0.5), 1, 1, fill=False, lw=2.2, ec="#1f3a93"
                )
            )
        ax.set_xticks(range(size), [f"chunk {c}" for c in range(size)], fontsize=8)
        ax.set_yticks(
            range(size), [f"rank {r}: sends {panel['sends'][r]}" for r in range(size)], fontsize=8
        )
        ax.tick_params(length=0)
        ax.set_title(panel["title"], fontsize=9)
    fig.suptitle(
        f"Ring allreduce on {size} ranks: what each rank holds after each step "
        "(outlined: the chunk it just received from its left neighbour)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
