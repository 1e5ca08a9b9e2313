"""hvdcourse.course.bench.published: published tables, transcribed, with their speedups and inconsistencies."""

from hvdcourse.course.bench.published import as_fraction, horovod_ray_table


def test_accuracy_in_percent_and_fractions_become_fractions():
    assert as_fraction(90.2) == 0.902 and as_fraction(0.9883) == 0.9883


def test_horovod_ray_two_gpus_never_reach_2x_and_horovod_is_sometimes_slower():
    table = horovod_ray_table()
    assert table["speedup (time)"].max() < 2
    horovod = table[table.framework == "Horovod"]
    assert (horovod["speedup (images/s)"] < 1).sum() == 2


def test_horovod_ray_images_per_second_is_60000_over_training_time_in_most_rows():
    table = horovod_ray_table()
    matches = abs(table["60000/time 2 GPUs"] - table["images/s 2 GPUs"]) <= 1
    assert matches.all()
