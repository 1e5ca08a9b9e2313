"""hvdcourse.runtime.machine: every result file says what it was measured on."""

from hvdcourse.runtime.machine import describe_machine, memcopy_bandwidth

KEYS = {
    "cpu_model",
    "logical_cores",
    "memory_gib",
    "os",
    "python",
    "tensorflow",
    "horovod",
    "mpi",
    "date",
    "load_average_1_5_15min",
}


def test_machine_description_names_cpu_cores_memory_os_versions_date_and_load():
    desc = describe_machine()
    assert KEYS <= set(desc)
    assert desc["logical_cores"] >= 1 and desc["memory_gib"] > 0
    assert len(desc["load_average_1_5_15min"]) == 3
    assert desc["tensorflow"].startswith("2.20") and desc["horovod"] == "0.28.1"
    assert desc["keras"].startswith("2.20")  # tf-keras, not Keras 3


def test_memcopy_bandwidth_is_bytes_over_median_time():
    result = memcopy_bandwidth(nbytes=4 * 2**20, repeats=3)
    assert result["bytes"] == 4 * 2**20
    assert result["bytes_per_second"] == result["bytes"] / result["median_seconds"]
