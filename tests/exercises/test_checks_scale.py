"""Checks of exercises 12-14 (hvdcourse/course/exercises/checks_scale.py): right answers pass on the
ranks, wrong ones get the intended findings and hints, rank by rank."""

import sys

import cloudpickle
import numpy as np

from hvdcourse.course.exercises import checks_scale as checks

# the answers below go to the ranks by value, as a notebook's functions do
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def failed(result):
    return {f.criterion for f in result.findings if not f.passed}


def finding(result, text_start):
    return next(f for f in result.findings if f.criterion.startswith(text_start))


def shard_columns(weight, bias, rank, size):
    n = weight.shape[1] // size
    return weight[:, rank * n : (rank + 1) * n], bias[rank * n : (rank + 1) * n]


def column_parallel_linear(comm, x, weight_shard, bias_shard):
    return np.concatenate(comm.allgather(x @ weight_shard + bias_shard), axis=1)


def test_ex12_right_layer_passes_on_2_and_4_ranks():
    result = checks.ex12_column_parallel(shard_columns, column_parallel_linear, quiet=True)
    assert result.passed and result.score == 5


def test_ex12_row_shards_are_told_to_cut_by_columns():
    def by_rows(weight, bias, rank, size):
        n = weight.shape[0] // size
        return weight[rank * n : (rank + 1) * n, :], bias

    result = checks.ex12_column_parallel(by_rows, column_parallel_linear, quiet=True)
    assert "each rank keeps its own block of 1/N of the columns of W and b" in failed(result)
    assert "block of ROWS" in finding(result, "each rank keeps").hint


def test_ex12_output_without_the_gather_names_the_rank_and_asks_for_one_allgather():
    def local_only(comm, x, weight_shard, bias_shard):
        return x @ weight_shard + bias_shard

    result = checks.ex12_column_parallel(shard_columns, local_only, quiet=True)
    output = finding(result, "on 2 ranks every rank")
    assert not output.passed and "rank 0 returned an output of shape (3, 4)" in output.detail
    assert "gather the other ranks' blocks" in output.hint


def test_ex12_collectives_other_than_allgather_are_switched_off_with_a_hint():
    def summing(comm, x, weight_shard, bias_shard):
        return comm.allreduce(x @ weight_shard + bias_shard)

    result = checks.ex12_column_parallel(shard_columns, summing, quiet=True)
    assert "comm.allgather(local)" in finding(result, "on 2 ranks every rank").hint


def predicted_bubble(stages, micro_batches):
    return (stages - 1) / (micro_batches + stages - 1)


def measured_idle_share(ops, step_time):
    return 1 - sum(end - start for _, _, start, end in ops) / step_time


def test_ex13_right_prediction_and_measurement_pass_on_2_ranks():
    assert checks.ex13_pipeline_bubble(predicted_bubble, measured_idle_share, quiet=True).passed


def test_ex13_bubble_over_the_work_gets_the_share_of_the_step_hint():
    result = checks.ex13_pipeline_bubble(lambda p, m: (p - 1) / m, measured_idle_share, quiet=True)
    assert failed(result) == {"predicted_bubble(p, m) is (p-1)/(m+p-1)"}
    assert "idle time over the WORK" in finding(result, "predicted_bubble").hint


def test_ex13_busy_share_instead_of_idle_fails_on_simulated_and_on_each_rank():
    def busy_share(ops, step_time):
        return sum(end - start for _, _, start, end in ops) / step_time

    result = checks.ex13_pipeline_bubble(predicted_bubble, busy_share, quiet=True)
    assert "that is the busy share" in finding(result, "idle_share on simulated").hint
    ranks = finding(result, "on 2 real ranks")
    assert not ranks.passed and ranks.detail.startswith("rank 0 (the first stage")


def test_ex14_expected_steps_scale_with_k_when_summed():
    steps = checks.accumulation_steps(2, 4, 4, 0.05)
    assert np.allclose(steps["k_lr"] - steps["start"], 4 * (steps["large"] - steps["start"]))
    assert not np.allclose(steps["plain"], steps["large"])
    assert not np.allclose(steps["local"][0], steps["local"][1])


def test_ex14_summed_accumulation_loses_the_exactness_points_with_the_averaging_hint():
    def summed(hvd, lr, k):
        import tensorflow as tf

        return hvd.DistributedOptimizer(
            tf.keras.optimizers.SGD(learning_rate=lr), backward_passes_per_step=k
        )

    result = checks.ex14_accumulation(summed, quiet=True)
    assert (result.score, result.max_score) == (3, 5)
    assert "average_aggregated_gradients=True" in finding(result, "after k batches").hint


def test_ex14_optimizer_without_horovod_steps_every_batch_and_ranks_drift_apart():
    def plain(hvd, lr, k):
        import tensorflow as tf

        return tf.keras.optimizers.SGD(learning_rate=lr)

    result = checks.ex14_accumulation(plain, quiet=True)
    assert failed(result) == {
        "both ranks end with the same weights",
        "the weights change only after the k-th batch",
        "after k batches the weights are those of one step of the k times larger batch",
    }
    assert (
        "rank 0: the weights changed after batch 1 of 4"
        in finding(result, "the weights change").detail
    )
