"""CPU-GPU binding masks (hvdcourse.runtime.binding) against the NUMA maps of the site files and of the Supercomputers talk."""

import os

import pytest

from conftest import ROOT
from hvdcourse.runtime import binding

SITES = os.path.join(ROOT, "slurm", "sites")

# What `srun rocm-smi --showtoponuma` and `srun lscpu | grep NUMA` print on a LUMI-G node (the Supercomputers talk).
LUMI_ROCM_SMI = "\n".join(
    f"GPU[{gpu}]      : (Topology) Numa Node: {numa}"
    for gpu, numa in enumerate([3, 3, 1, 1, 0, 0, 2, 2])
)
LUMI_LSCPU = """NUMA node(s):                4
NUMA node0 CPU(s):           0-15,64-79
NUMA node1 CPU(s):           16-31,80-95
NUMA node2 CPU(s):           32-47,96-111
NUMA node3 CPU(s):           48-63,112-127
"""
LUMI_RESERVED = set(range(0, 64, 8))  # core 0 of every CCD is kept for the system on LUMI
# The Supercomputers talk's mask line, as printed in its slides (${fe} is never set).
TALK_MASK = (
    "0x${fe}000000000000,0x${fe}0000000000000000,0x${fe}0000,0x${fe}000000,0x${fe},0x${fe}00,"
    "0x${fe}00000000,0x${fe}000000000000"
)


def lumi_layout():
    return binding.layout_from_site(binding.read_site(os.path.join(SITES, "lumi-g.env")))


def test_lumi_site_file_has_the_numa_map_that_rocm_smi_reports():
    layout = lumi_layout()
    assert dict(enumerate(layout.gpu_numa)) == binding.parse_gpu_numa(LUMI_ROCM_SMI)


def test_lumi_masks_keep_every_rank_inside_its_gpus_numa_domain():
    masks = binding.masks(lumi_layout())
    problems = binding.check_masks(
        masks,
        binding.parse_gpu_numa(LUMI_ROCM_SMI),
        binding.parse_lscpu_numa(LUMI_LSCPU),
        reserved=LUMI_RESERVED,
    )
    assert problems == []


def test_lumi_masks_give_each_gcd_the_seven_usable_cores_of_one_ccd():
    for gpu, mask in enumerate(binding.masks(lumi_layout())):
        cores = binding.cores_of(mask)
        assert len(cores) == 7, (gpu, hex(mask))
        assert cores[0] % 8 == 1 and cores[-1] == cores[0] + 6  # cores 8k+1 .. 8k+7 of CCD k


def test_lumi_masks_equal_the_0xfe_shifted_by_ccd_list():
    # GCD -> CCD 6,7,2,3,0,1,4,5: 0xfe << 8*CCD
    expected = [0xFE << 8 * ccd for ccd in (6, 7, 2, 3, 0, 1, 4, 5)]
    assert binding.masks(lumi_layout()) == expected


def test_lumi_map_cpu_is_the_talks_list():
    assert binding.map_cpu(lumi_layout()) == [49, 57, 17, 25, 1, 9, 33, 41]


def test_each_lumi_map_cpu_core_is_inside_its_mask():
    layout = lumi_layout()
    for core, mask in zip(binding.map_cpu(layout), binding.masks(layout)):
        assert mask >> core & 1


def test_talks_mask_line_collapses_to_zero_masks_in_bash():
    masks = binding.parse_mask_list(binding.expand_like_bash(TALK_MASK))
    assert masks == [0] * 8
    problems = binding.check_masks(
        masks, binding.parse_gpu_numa(LUMI_ROCM_SMI), binding.parse_lscpu_numa(LUMI_LSCPU)
    )
    assert len(problems) == 8 and all("selects no core" in p for p in problems)


def test_talks_mask_line_with_fe_filled_in_still_binds_two_gcds_wrongly():
    masks = binding.parse_mask_list(binding.expand_like_bash(TALK_MASK, {"fe": "fe"}))
    problems = binding.check_masks(
        masks, binding.parse_gpu_numa(LUMI_ROCM_SMI), binding.parse_lscpu_numa(LUMI_LSCPU)
    )
    # 0xfe << 64
    assert any(p.startswith("GPU 1 ") and "outside its NUMA domain" in p for p in problems)
    # copy of GPU 0
    assert any(p.startswith("GPU 7:") and "also in the mask of GPU 0" in p for p in problems)


def test_gh200_gives_each_gpu_all_72_cores_of_its_grace():
    layout = binding.layout_from_site(binding.read_site(os.path.join(SITES, "gh200.env")))
    numa_cpus = {n: layout.numa_cores(n) for n in range(4)}
    masks = binding.masks(layout)
    assert binding.check_masks(masks, dict(enumerate(layout.gpu_numa)), numa_cpus) == []
    assert [len(binding.cores_of(m)) for m in masks] == [72] * 4


def test_more_gpus_than_core_groups_in_a_numa_domain_is_an_error():
    with pytest.raises(ValueError, match="NUMA domain 0 has only 2 core group"):
        binding.NodeLayout((0, 0, 0), cores_per_numa=16, cores_per_group=8).gpu_cores()


def test_sites_without_a_numa_map_have_no_layout():
    assert binding.layout_from_site(binding.read_site(os.path.join(SITES, "cpu.env"))) is None


def test_command_line_prints_the_srun_value(capsys):
    assert binding.main(["--site", os.path.join(SITES, "lumi-g.env"), "--format", "mask_cpu"]) == 0
    assert capsys.readouterr().out.strip() == binding.mask_cpu_option(lumi_layout())


def test_describe_mask_names_the_cpus_whose_bits_are_set():
    assert binding.describe_mask(0xFE000000000000) == "0xfe000000000000 = CPUs 49-55"
    assert binding.describe_mask(0x5) == "0x5 = CPUs 0,2"


def test_describe_mask_says_when_a_mask_allows_no_cpu():
    assert binding.describe_mask(0) == "0x0 = no CPU at all"


def test_cpu_bind_verbose_lines_give_each_task_its_node_ranks_and_cpus():
    text = (
        "cpu-bind=MASK - nid005001, task  9  1 [4242]: mask 0xfe00000000000000 set\n"
        "some output of the program\n"
        "cpu-bind=MASK - nid005000, task  0  0 [4241]: mask 0xfe000000000000 set\n"
    )
    tasks = binding.parse_cpu_bind_verbose(text)
    assert [(t["node"], t["task"], t["local"]) for t in tasks] == [
        ("nid005000", 0, 0),
        ("nid005001", 9, 1),
    ]
    assert tasks[0]["cpus"] == list(range(49, 56)) and tasks[1]["cpus"] == list(range(57, 64))


def test_cpu_bind_verbose_lines_match_the_masks_computed_for_lumi():
    masks = binding.masks(lumi_layout())
    text = "\n".join(
        f"cpu-bind=MASK - nid005000, task {r:2d} {r:2d} [{100 + r}]: mask {hex(m)} set"
        for r, m in enumerate(masks)
    )
    assert [t["mask"] for t in binding.parse_cpu_bind_verbose(text)] == masks


# A node of two sockets, one NUMA domain each, 2 cores of 2 hardware threads per socket, as
# `numactl -H`, `lscpu | grep NUMA` and `lstopo-no-graphics --no-io -c` (hwloc 2.9) print it.
TWO_SOCKET_NUMACTL = """available: 2 nodes (0-1)
node 0 cpus: 0 1 4 5
node 0 size: 64305 MB
node 0 free: 60113 MB
node 1 cpus: 2 3 6 7
node 1 size: 64507 MB
node 1 free: 61020 MB
node distances:
node   0   1
  0:  10  21
  1:  21  10
"""
TWO_SOCKET_LSCPU = """NUMA node(s):                2
NUMA node0 CPU(s):           0,1,4,5
NUMA node1 CPU(s):           2,3,6,7
"""
TWO_SOCKET_LSTOPO = """Machine (126GB total) cpuset=0x000000ff
  Package L#0 cpuset=0x00000033
    NUMANode L#0 (P#0 63GB) cpuset=0x00000033
    L3 L#0 (16MB) cpuset=0x00000033
      L2 L#0 (1024KB) + L1d L#0 (32KB) + L1i L#0 (32KB) + Core L#0 cpuset=0x00000011
        PU L#0 (P#0) cpuset=0x00000001
        PU L#1 (P#4) cpuset=0x00000010
      L2 L#1 (1024KB) + L1d L#1 (32KB) + L1i L#1 (32KB) + Core L#1 cpuset=0x00000022
        PU L#2 (P#1) cpuset=0x00000002
        PU L#3 (P#5) cpuset=0x00000020
  Package L#1 cpuset=0x000000cc
    NUMANode L#1 (P#1 63GB) cpuset=0x000000cc
    L3 L#1 (16MB) cpuset=0x000000cc
      L2 L#2 (1024KB) + L1d L#2 (32KB) + L1i L#2 (32KB) + Core L#2 cpuset=0x00000044
        PU L#4 (P#2) cpuset=0x00000004
        PU L#5 (P#6) cpuset=0x00000040
      L2 L#3 (1024KB) + L1d L#3 (32KB) + L1i L#3 (32KB) + Core L#3 cpuset=0x00000088
        PU L#6 (P#3) cpuset=0x00000008
        PU L#7 (P#7) cpuset=0x00000080
"""


def test_lscpu_numactl_and_lstopo_give_the_same_numa_map():
    expected = {0: [0, 1, 4, 5], 1: [2, 3, 6, 7]}
    assert binding.parse_numactl_numa(TWO_SOCKET_NUMACTL) == expected
    assert binding.parse_lscpu_numa(TWO_SOCKET_LSCPU) == expected
    assert binding.lstopo_numa(TWO_SOCKET_LSTOPO) == expected


def test_numactl_memory_is_read_per_numa_domain():
    assert binding.parse_numactl_memory(TWO_SOCKET_NUMACTL) == {0: 64305, 1: 64507}


def test_lstopo_cpusets_give_the_caches_and_cores_of_joined_lines():
    objects = binding.parse_lstopo_cpusets(TWO_SOCKET_LSTOPO)
    assert objects["L3"] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert objects["Core"] == [[0, 4], [1, 5], [2, 6], [3, 7]] == objects["L2"]
    assert len(objects["PU"]) == 8


def test_hwloc_cpuset_of_several_words_is_one_mask():
    assert binding.parse_hwloc_cpuset("0x00000003") == 0x3
    assert binding.parse_hwloc_cpuset("0x0000000f,0x00000001") == 0xF00000001


def test_cpu_lists_as_linux_writes_them_expand_ranges():
    assert binding.parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]


def test_check_masks_names_ranks_when_asked():
    problems = binding.check_masks([0x1, 0x1], {0: 0, 1: 0}, {0: [0, 1]}, unit="rank")
    assert problems == ["rank 1: core 0 is also in the mask of rank 0"]
