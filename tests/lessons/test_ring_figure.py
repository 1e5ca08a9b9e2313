"""hvdcourse.course.lessons.ring_figure: one panel per ring step, drawn from the trace (no MPI, no engines)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from hvdcourse.course.lessons import ring, ring_figure  # noqa: E402


def expected_cells(table, size):
    return [
        ["Σ" if len(cell) == size else "+".join(map(str, cell)) for cell in row] for row in table
    ]


@pytest.mark.parametrize("size", [2, 4])
def test_the_figure_has_one_panel_per_step(size):
    fig = ring_figure.plot_ring_steps(size)
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        assert len(fig.axes) == 2 * (size - 1) == ring.ring_steps(size)
    finally:
        plt.close(fig)


def test_each_panel_shows_what_the_trace_says_each_rank_holds_after_that_step():
    size = 4
    fig = ring_figure.plot_ring_steps(size)
    try:
        for ax, (label, table) in zip(fig.axes, ring.ring_trace(size)[1:]):
            assert ax.get_title() == label
            shown = {
                (round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
                for t in ax.texts
            }
            cells = expected_cells(table, size)
            assert shown == {(r, c): cells[r][c] for r in range(size) for c in range(size)}
    finally:
        plt.close(fig)


def test_each_panel_names_the_chunk_each_rank_sends_and_outlines_the_one_it_receives():
    size = 4
    fig = ring_figure.plot_ring_steps(size)
    schedule = ring.ring_schedule(size)
    try:
        for ax, (label, _) in zip(fig.axes, ring.ring_trace(size)[1:]):
            phase, _, step = label.rpartition(" step ")
            moves = sorted(
                (s for s in schedule if s["phase"] == phase and s["step"] == int(step) - 1),
                key=lambda s: s["rank"],
            )
            rows = [tick.get_text() for tick in ax.get_yticklabels()]
            assert rows == [f"rank {s['rank']}: sends {s['send']}" for s in moves]
            outlined = sorted((round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in ax.patches)
            assert outlined == [(s["rank"], s["recv"]) for s in moves]
    finally:
        plt.close(fig)


def test_the_last_panel_shows_every_rank_holding_every_complete_chunk():
    panels = ring_figure.step_panels(4)
    assert panels[2]["title"] == "reduce-scatter step 3"
    assert [row.count("Σ") for row in panels[2]["cells"]] == [1, 1, 1, 1]
    assert all(cell == "Σ" for row in panels[-1]["cells"] for cell in row)


def test_a_single_rank_has_no_step_to_draw():
    with pytest.raises(ValueError, match="no communication step"):
        ring_figure.plot_ring_steps(1)
