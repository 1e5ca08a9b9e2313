"""hvdcourse.course.lessons.hardware: the memory and compute estimates of lesson 1 follow their published formulas."""

import math

from hvdcourse.course.lessons import hardware

GCD = hardware.ACCELERATORS["MI250X GCD (LUMI-G)"]


def test_adam_training_state_is_16_bytes_per_parameter():
    assert math.isclose(hardware.training_state_gb(1e9), 16.0)


def test_activations_follow_korthikanti_formula():
    model = hardware.Transformer("toy", 1e6, layers=2, hidden=8, heads=2, seq_len=4)
    per_layer = 4 * 3 * 8 * (34 + 5 * 2 * 4 / 8)  # s * b * h * (34 + 5 a s / h), batch 3
    assert math.isclose(hardware.activation_gb(model, batch=3), 2 * per_layer / 1e9)


def test_gpt3_training_costs_about_3_point_15e23_flops():
    assert math.isclose(hardware.training_flops(175e9, 300e9), 3.15e23)


def test_twice_the_devices_halves_the_ideal_training_time():
    flops = 1e21
    assert math.isclose(
        hardware.training_days(flops, 2, GCD), hardware.training_days(flops, 1, GCD) / 2
    )


def test_largest_batch_fits_and_one_more_does_not():
    model = next(m for m in hardware.MODELS if m.name == "GPT-2 XL")
    b = hardware.max_batch(model, GCD)

    def need(batch):
        return hardware.training_state_gb(model.params) + hardware.activation_gb(model, batch)

    assert b >= 1 and need(b) <= GCD.memory_gb < need(b + 1)


def test_a_model_whose_state_exceeds_the_device_gets_batch_zero():
    model = next(m for m in hardware.MODELS if m.name == "GPT-3")
    assert hardware.max_batch(model, GCD) == 0


def test_memory_table_has_one_row_per_model():
    rows = hardware.memory_table(GCD)
    assert [r["model"] for r in rows] == [m.name for m in hardware.MODELS]


def test_lumi_g_node_has_8_gcds_of_64_gb():
    assert hardware.LUMI_G.devices == 8 and hardware.LUMI_G.device.memory_gb == 64
