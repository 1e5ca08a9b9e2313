"""hvdcourse.course.lessons.model_parallel.pipeline without MPI: the schedules, the simulation, the bubble formula."""

import numpy as np
import pytest

from hvdcourse.course.lessons.model_parallel import pipeline
from hvdcourse.runtime.errors import UsageError


@pytest.mark.parametrize(
    "stages, m, expected", [(2, 1, 1 / 2), (2, 4, 1 / 5), (4, 8, 3 / 11), (1, 3, 0)]
)
def test_bubble_formula_is_p_minus_1_over_m_plus_p_minus_1(stages, m, expected):
    assert pipeline.bubble_fraction(stages, m) == pytest.approx(expected)


@pytest.mark.parametrize("kind", pipeline.SCHEDULES)
@pytest.mark.parametrize("stages, m", [(2, 1), (2, 4), (3, 5), (4, 8), (4, 2)])
def test_simulated_schedules_idle_exactly_as_the_formula_says(kind, stages, m):
    run = pipeline.simulate(kind, stages, m, t_forward=1.0, t_backward=2.0)
    assert run["idle_fraction"] == pytest.approx(pipeline.bubble_fraction(stages, m))
    assert run["step_time"] == pytest.approx((m + stages - 1) * 3.0)


@pytest.mark.parametrize("kind", pipeline.SCHEDULES)
def test_every_stage_runs_each_forward_and_backward_once(kind):
    for ops in pipeline.schedule(kind, 3, 5):
        assert sorted(ops) == sorted([("F", i) for i in range(5)] + [("B", i) for i in range(5)])


def test_1f1b_fills_the_pipeline_then_alternates():
    first, last = pipeline.schedule("1f1b", 2, 3)
    assert first == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)]
    assert last == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2)]


def test_unknown_schedule_and_bad_sizes_are_usage_errors():
    with pytest.raises(UsageError, match="choose one of gpipe, 1f1b"):
        pipeline.schedule("interleaved", 2, 4)
    with pytest.raises(UsageError, match="at least one micro-batch"):
        pipeline.bubble_fraction(2, 0)
    with pytest.raises(UsageError, match="multiple of 2"):
        pipeline.split_stages(pipeline.init_layers(4, 3), 2)


def test_stages_run_one_after_the_other_give_the_whole_stack():
    layers = pipeline.init_layers(6, 4, seed=3)
    x = np.random.default_rng(0).standard_normal((5, 6))
    whole, _ = pipeline.stage_forward(layers, x)
    first, second = pipeline.split_stages(layers, 2)
    np.testing.assert_allclose(
        pipeline.stage_forward(second, pipeline.stage_forward(first, x)[0])[0], whole
    )


def test_reference_gradients_match_finite_differences():
    layers = pipeline.init_layers(3, 2, seed=1)
    rng = np.random.default_rng(2)
    x, target = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    _, grads = pipeline.reference_step(layers, x, target)
    w, _ = layers[0]
    eps = 1e-6
    w[1, 2] += eps
    up, _ = pipeline.reference_step(layers, x, target)
    w[1, 2] -= 2 * eps
    down, _ = pipeline.reference_step(layers, x, target)
    assert grads[0][0][1, 2] == pytest.approx((up - down) / (2 * eps), rel=1e-6)
