"""hvdcourse.course.lessons.model_parallel.memory: the per-device arithmetic and the advice."""

import pytest

from hvdcourse.course.lessons import hardware
from hvdcourse.course.lessons.model_parallel import memory
from hvdcourse.runtime.errors import UsageError

LLAMA7 = "Llama-2 7B"
LUMI = "LUMI-G"


def test_mixed_precision_adam_costs_16_bytes_per_parameter_on_one_device():
    model = memory.model_named(LLAMA7)
    need = memory.per_device_gb(model, memory.Plan("one", "data"))
    state = need["weights"] + need["gradients"] + need["optimizer"]
    assert state == pytest.approx(hardware.training_state_gb(model.params))


def test_a_gpt_block_keeps_the_activations_of_korthikanti_eq_2():
    model = memory.model_named("GPT-3")
    need = memory.per_device_gb(model, memory.Plan("one", "data"))
    assert need["activations"] == pytest.approx(hardware.activation_gb(model, 1))
    assert memory.activation_terms(model) == {"replicated": 10, "split": 24, "scores": 5}


def test_a_llama_block_keeps_its_own_tensors_about_half_of_gpts():
    # SwiGLU (3 matrices, inner size f), no dropout, grouped-query attention in 70B
    for name, kv in (("Llama-2 7B", 1.0), ("Llama-2 70B", 8 / 64)):
        model = memory.model_named(name)
        f = model.ffn / model.hidden
        assert memory.activation_terms(model) == pytest.approx(
            {"replicated": 8, "split": 2 + 4 * kv + 2 + 6 * f, "scores": 2}
        )
        ours = memory.activation_bytes_per_layer(model)
        gpt = model.seq_len * model.hidden * (34 + 5 * model.heads * model.seq_len / model.hidden)
        assert 0.4 < ours / gpt < 0.6, name


def test_zero_stages_shard_optimizer_then_gradients_then_weights():
    model = memory.model_named(LLAMA7)
    one = memory.per_device_gb(model, memory.Plan("one", "data"))
    for stage, sharded in [
        (1, {"optimizer"}),
        (2, {"optimizer", "gradients"}),
        (3, {"optimizer", "gradients", "weights"}),
    ]:
        need = memory.per_device_gb(model, memory.Plan("z", f"zero{stage}", data=8, zero=stage))
        for part in ("weights", "gradients", "optimizer"):
            assert need[part] == pytest.approx(one[part] / (8 if part in sharded else 1)), (
                stage,
                part,
            )
        assert need["activations"] == one["activations"]


def test_tensor_parallelism_divides_state_and_most_activations():
    model = memory.model_named("GPT-3")
    need = memory.per_device_gb(model, memory.Plan("t", "tensor", tensor=8))
    assert need["weights"] == pytest.approx(model.params * 2 / 8 / 1e9)
    s, h, a = model.seq_len, model.hidden, model.heads
    assert need["activations"] == pytest.approx(
        model.layers * s * h * (10 + 3 + 5 * a * s / (8 * h)) / 1e9
    )


def test_recomputation_keeps_only_each_layers_input():
    model = memory.model_named(LLAMA7)
    need = memory.per_device_gb(model, memory.Plan("one", "data"), recompute=True)
    assert need["activations"] == pytest.approx(
        model.layers * 2 * model.seq_len * model.hidden / 1e9
    )


def test_a_small_model_fits_one_device_and_is_plain_data_parallel():
    found = memory.advise("BERT-Large", LUMI)
    assert found["fits_one_device"] and found["plan"].kind == "data"
    assert "Horovod" in found["tools"]


def test_llama_70b_needs_tensor_and_pipeline_parallelism_on_lumi():
    found = memory.advise("Llama-2 70B", LUMI, recompute=True)
    assert not found["fits_one_device"]
    assert found["plan"].kind == "tensor+pipeline"
    assert found["per_device"]["total"] <= 64
    # the next smaller pipeline would not fit
    smaller = [
        p
        for p in memory.candidate_plans(memory.model_named("Llama-2 70B"), hardware.LUMI_G)
        if p.kind == "tensor+pipeline" and p.pipeline < found["plan"].pipeline
    ]
    assert all(
        memory.per_device_gb(memory.model_named("Llama-2 70B"), p, recompute=True)["total"] > 64
        for p in smaller
    )


def test_advice_table_has_a_row_per_model_and_node():
    rows = memory.advice_table(recompute=True)
    assert len(rows) == len(hardware.MODELS) * len(hardware.NODES)


def test_unknown_names_and_impossible_splits_are_usage_errors():
    with pytest.raises(UsageError, match="no model called 'GPT-5'; choose one of"):
        memory.advise("GPT-5", LUMI)
    with pytest.raises(UsageError, match="no node called"):
        memory.advise(LLAMA7, "my laptop")
    with pytest.raises(UsageError, match="must divide the heads"):
        memory.per_device_gb(memory.model_named("GPT-2 XL"), memory.Plan("t", "tensor", tensor=2))
    with pytest.raises(UsageError, match="unknown precision"):
        memory.per_device_gb(
            memory.model_named(LLAMA7), memory.Plan("one", "data"), precision="fp8"
        )
