"""CPU-GPU binding: one group of cores per GPU, next to it (lesson: Multi-node training with Slurm).

A rank should run on cores of the NUMA domain its GPU is attached to. The layout of a node is data
(read from ``rocm-smi --showtoponuma`` / ``nvidia-smi topo -m`` and ``lscpu``, kept in the site files
``slurm/sites/*.env``); this module turns it into Slurm's ``--cpu-bind=mask_cpu:`` /
``map_cpu:`` lists and checks any list against the layout. The job script's dry run, the tests and
the lesson all call it:

``python -m hvdcourse.runtime.binding --site slurm/sites/lumi-g.env``  - one line per local rank
``python -m hvdcourse.runtime.binding --site slurm/sites/lumi-g.env --format mask_cpu``  - for ``srun --cpu-bind``
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeLayout:
    """Cores and GPUs of one node, numbered as Linux numbers physical cores (SMT siblings ignored).

    ``gpu_numa[i]``: NUMA domain of GPU i. NUMA domain n holds cores ``n*cores_per_numa`` to
    ``(n+1)*cores_per_numa - 1``, split into groups of ``cores_per_group`` cores sharing a cache
    (a CCD on AMD EPYC); each GPU gets its own group. ``reserved_per_group``: first cores of every
    group that jobs may not use (LUMI keeps core 0 of each CCD for the operating system).
    """

    gpu_numa: tuple
    cores_per_numa: int
    cores_per_group: int = 0  # 0: the whole NUMA domain is one group
    reserved_per_group: int = 0

    @property
    def group_size(self) -> int:
        return self.cores_per_group or self.cores_per_numa

    def numa_cores(self, numa: int) -> list:
        """Physical cores of NUMA domain ``numa``."""
        return list(range(numa * self.cores_per_numa, (numa + 1) * self.cores_per_numa))

    def gpu_cores(self) -> list:
        """For each GPU, the usable cores of the cache group it gets inside its NUMA domain."""
        if self.cores_per_numa % self.group_size:
            raise ValueError(
                f"{self.cores_per_numa} cores per NUMA domain cannot be split into "
                f"groups of {self.group_size}"
            )
        groups_per_numa = self.cores_per_numa // self.group_size
        taken: dict = {}
        result = []
        for gpu, numa in enumerate(self.gpu_numa):
            k = taken.get(numa, 0)
            if k >= groups_per_numa:
                raise ValueError(
                    f"GPU {gpu}: NUMA domain {numa} has only {groups_per_numa} core "
                    f"group(s) and they are taken; give fewer GPUs per domain"
                )
            taken[numa] = k + 1
            first = numa * self.cores_per_numa + k * self.group_size
            result.append(list(range(first + self.reserved_per_group, first + self.group_size)))
        return result


def layout_from_site(values: dict) -> NodeLayout | None:
    """The layout described by a site file's ``SITE_GPU_NUMA`` ... keys (None if it gives none)."""
    gpu_numa = values.get("SITE_GPU_NUMA", "").replace(",", " ").split()
    if not gpu_numa:
        return None
    return NodeLayout(
        tuple(int(n) for n in gpu_numa),
        int(values["SITE_CORES_PER_NUMA"]),
        int(values.get("SITE_CORES_PER_GROUP") or 0),
        int(values.get("SITE_RESERVED_PER_GROUP") or 0),
    )


def read_site(path: str) -> dict:
    """The ``SITE_*=value`` assignments of a site file (plain values, as bash would read them)."""
    values = {}
    with open(path) as fh:
        for line in fh:
            match = re.match(r"^\s*(?:export\s+)?(SITE_[A-Z0-9_]+)=(.*)$", line)
            if match:
                words = shlex.split(match.group(2), comments=True)
                values[match.group(1)] = " ".join(words)
    return values


def mask_of(cores) -> int:
    """Bit mask with bit c set for every core c (Slurm's ``mask_cpu`` entry, as an int)."""
    mask = 0
    for core in cores:
        mask |= 1 << core
    return mask


def cores_of(mask: int) -> list:
    """The cores whose bits are set in ``mask``."""
    return [bit for bit in range(mask.bit_length()) if mask >> bit & 1]


def masks(layout: NodeLayout) -> list:
    """One core mask per GPU (local rank i runs on GPU i with mask i)."""
    return [mask_of(cores) for cores in layout.gpu_cores()]


def map_cpu(layout: NodeLayout) -> list:
    """One core per GPU: the first usable core of its group (``--cpu-bind=map_cpu:``)."""
    return [cores[0] for cores in layout.gpu_cores()]


def mask_cpu_option(layout: NodeLayout) -> str:
    """The value of ``srun --cpu-bind=`` that binds local rank i to the cores next to GPU i."""
    return "mask_cpu:" + ",".join(hex(m) for m in masks(layout))


def parse_mask_list(text: str) -> list:
    """``"mask_cpu:0xfe,0xfe00"`` or ``"0xfe, 0xfe00"`` -> [254, 65024]; a bare ``0x`` is 0."""
    text = text.split(":", 1)[1] if ":" in text else text
    items = [item for item in re.split(r"[,\s]+", text.strip()) if item]
    return [int(re.sub(r"^0[xX]", "", item) or "0", 16) for item in items]


def describe_mask(mask: int) -> str:
    """What a CPU mask means: ``0xfe000000000000`` -> ``'0xfe000000000000 = CPUs 49-55'``.

    A mask is the set of CPUs a task may run on, written as a hexadecimal number whose bit n is CPU n
    (the CPU numbers of ``lscpu``/``/proc/cpuinfo``, hardware threads included). Slurm's
    ``--cpu-bind=mask_cpu:`` takes one per task, and ``--cpu-bind=verbose`` prints the one each task got.
    """
    cores = cores_of(mask)
    return f"{hex(mask)} = " + (f"CPUs {_ranges(cores)}" if cores else "no CPU at all")


_VERBOSE_LINE = re.compile(
    r"cpu-bind=(?P<kind>[\w-]+) - (?P<node>\S+), task\s+(?P<task>\d+)\s+(?P<local>\d+)"
    r"\s+\[(?P<pid>\d+)\]: mask (?P<mask>0x[0-9a-fA-F]+) set"
)


def parse_cpu_bind_verbose(text: str) -> list:
    """The lines ``srun --cpu-bind=verbose,...`` prints, one dict per task: node, task (global rank),
    local (rank on the node), mask (int) and cpus (list). Example line:
    ``cpu-bind=MASK - nid005000, task  1  1 [12345]: mask 0xfe0000 set``."""
    tasks = []
    for m in _VERBOSE_LINE.finditer(text):
        mask = int(m["mask"], 16)
        tasks.append(
            {
                "node": m["node"],
                "task": int(m["task"]),
                "local": int(m["local"]),
                "pid": int(m["pid"]),
                "mask": mask,
                "cpus": cores_of(mask),
            }
        )
    return sorted(tasks, key=lambda t: t["task"])


def expand_like_bash(text: str, variables: dict | None = None) -> str:
    """Expand ``${name}`` / ``$name`` as bash does: an unset variable becomes the empty string."""
    variables = variables or {}
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), ""), text
    )


def parse_cpu_list(text: str) -> list:
    """A CPU list as Linux writes it (``lscpu``, ``Cpus_allowed_list`` in ``/proc/PID/status``,
    ``taskset -c``): ``"0-3,8,10-11"`` -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus = []
    for part in text.strip().split(","):
        if part:
            low, _, high = part.partition("-")
            cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def parse_lscpu_numa(text: str) -> dict:
    """``lscpu`` lines ``NUMA node3 CPU(s): 48-63,112-127`` -> {3: [48, ..., 63, 112, ..., 127]}."""
    return {
        int(node): parse_cpu_list(cpus)
        for node, cpus in re.findall(r"NUMA node(\d+) CPU\(s\):\s*([\d,\-]+)", text)
    }


def parse_gpu_numa(text: str) -> dict:
    """``rocm-smi --showtoponuma`` lines ``GPU[0] : (Topology) Numa Node: 3`` -> {0: 3, ...}."""
    return {
        int(gpu): int(numa)
        for gpu, numa in re.findall(r"GPU\[(\d+)\]\s*:\s*\(Topology\) Numa Node:\s*(\d+)", text)
    }


def parse_numactl_numa(text: str) -> dict:
    """``numactl -H`` lines ``node 1 cpus: 16 17 18`` -> {1: [16, 17, 18]} (a domain of memory
    only, ``node 2 cpus:`` with nothing after it, gives [])."""
    return {
        int(node): [int(cpu) for cpu in cpus.split()]
        for node, cpus in re.findall(r"^node (\d+) cpus:[ \t]*([\d \t]*)$", text, re.M)
    }


def parse_numactl_memory(text: str) -> dict:
    """``numactl -H`` lines ``node 0 size: 24105 MB`` -> {0: 24105} (MB of memory per domain)."""
    return {
        int(node): int(mb) for node, mb in re.findall(r"^node (\d+) size: (\d+) MB", text, re.M)
    }


_LSTOPO_LINE = re.compile(
    r"^\s*(?P<objects>\S.*?)\s+cpuset=(?P<cpuset>0x[0-9a-fA-F]+(?:,0x[0-9a-fA-F]+)*)\s*$"
)


def parse_hwloc_cpuset(text: str) -> int:
    """hwloc's CPU set ``0x00000003`` or ``0x0000000f,0xffffffff`` (32-bit words, highest first)
    -> the mask as an int (3, 0xfffffffff): the same bits as Slurm's ``mask_cpu``."""
    words = text.strip().split(",")
    return int("".join(w[2:].rjust(8, "0") if i else w[2:] for i, w in enumerate(words)), 16)


def parse_lstopo_cpusets(text: str) -> dict:
    """The objects of ``lstopo-no-graphics -c`` (``--cpuset``: every line ends ``cpuset=0x...``)
    by type, each as the list of CPUs it holds, in the order printed:
    ``{"Package": [[0, 1]], "NUMANode": [[0, 1]], "L3": [[0, 1]], "Core": [[0], [1]], "PU": ...}``.
    A line that joins objects with `` + `` (they share one CPU set) counts for each of them."""
    objects: dict = {}
    for line in text.splitlines():
        match = _LSTOPO_LINE.match(line)
        if not match:
            continue
        cpus = cores_of(parse_hwloc_cpuset(match["cpuset"]))
        for obj in match["objects"].split(" + "):
            objects.setdefault(obj.split()[0], []).append(cpus)
    return objects


def lstopo_numa(text: str) -> dict:
    """The NUMA domains of ``lstopo-no-graphics -c`` as {OS number (``P#``): CPUs}, the form of
    :func:`parse_lscpu_numa` and :func:`parse_numactl_numa`."""
    numa = {}
    for line in text.splitlines():
        found = re.search(r"NUMANode L#\d+ \(P#(\d+)[^)]*\) cpuset=(0x[0-9a-fA-F,x]+)", line)
        if found:
            numa[int(found[1])] = cores_of(parse_hwloc_cpuset(found[2]))
    return numa


def check_masks(mask_list, gpu_numa: dict, numa_cpus: dict, reserved=(), unit: str = "GPU") -> list:
    """Problems of ``mask_list`` (mask i for GPU i) against a node's NUMA map; [] if none.

    Checks that every mask is non-empty, stays inside its GPU's NUMA domain, avoids reserved
    cores and does not overlap another rank's mask. ``unit`` names what mask i belongs to in the
    messages ("GPU"; "rank" for CPU-only ranks, where ``gpu_numa`` maps rank i to its domain).
    """
    problems = []
    if len(mask_list) != len(gpu_numa):
        problems.append(f"{len(mask_list)} masks for {len(gpu_numa)} {unit}s")
    seen: dict = {}
    for gpu, mask in enumerate(mask_list):
        cores = cores_of(mask)
        if not cores:
            problems.append(f"{unit} {gpu}: mask {hex(mask)} selects no core at all")
            continue
        numa = gpu_numa.get(gpu)
        outside = [c for c in cores if numa is None or c not in numa_cpus.get(numa, ())]
        if outside:
            problems.append(
                f"{unit} {gpu} (NUMA {numa}): mask {hex(mask)} uses cores {_ranges(outside)} "
                f"outside its NUMA domain"
            )
        bad = [c for c in cores if c in reserved]
        if bad:
            problems.append(f"{unit} {gpu}: mask {hex(mask)} uses reserved cores {_ranges(bad)}")
        for core in cores:
            if core in seen:
                problems.append(
                    f"{unit} {gpu}: core {core} is also in the mask of {unit} {seen[core]}"
                )
                break
        for core in cores:
            seen.setdefault(core, gpu)
    return problems


def _ranges(cores) -> str:
    """[1, 2, 3, 9] -> '1-3,9'."""
    parts, cores = [], sorted(cores)
    start = prev = cores[0] if cores else None
    for core in cores[1:] + [None]:
        if core is not None and core == prev + 1:
            prev = core
            continue
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = core
    return ",".join(parts)


def rank_table(layout: NodeLayout, gpu_var: str = "GPU") -> list:
    """One line per local rank: its GPU, the GPU's NUMA domain, the rank's cores and their mask."""
    lines = []
    for rank, (numa, cores) in enumerate(zip(layout.gpu_numa, layout.gpu_cores())):
        lines.append(
            f"local rank {rank}: {gpu_var}={rank}  NUMA {numa}  cores {_ranges(cores):>7}  "
            f"mask {hex(mask_of(cores))}"
        )
    return lines


def plot_masks(layout: NodeLayout, mask_list=None, ax=None, title: str = ""):
    """Draw one row per GPU over the node's cores: its NUMA domain shaded, the cores of its mask
    (default: the masks this module computes) dark."""
    import matplotlib.pyplot as plt
    import numpy as np

    mask_list = masks(layout) if mask_list is None else mask_list
    n_cores = max(
        [layout.cores_per_numa * (max(layout.gpu_numa) + 1)] + [m.bit_length() for m in mask_list]
    )
    grid = np.zeros((len(layout.gpu_numa), n_cores))
    for gpu, (numa, mask) in enumerate(zip(layout.gpu_numa, mask_list)):
        grid[gpu, layout.numa_cores(numa)] = 1
        grid[gpu, cores_of(mask)] = 2
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.35 * len(layout.gpu_numa) + 1))
    ax.imshow(
        grid,
        cmap=plt.matplotlib.colors.ListedColormap(["white", "#c6dbef", "#08519c"]),
        vmin=0,
        vmax=2,
        aspect="auto",
        interpolation="nearest",
    )
    for boundary in range(layout.cores_per_numa, n_cores, layout.cores_per_numa):
        ax.axvline(boundary - 0.5, color="black", linewidth=1)
    ax.set_yticks(
        range(len(layout.gpu_numa)), [f"GPU {g} (NUMA {n})" for g, n in enumerate(layout.gpu_numa)]
    )
    ax.set_xticks(range(0, n_cores, layout.group_size))
    ax.set_xlabel("core (light: the GPU's NUMA domain, dark: the rank's mask)")
    ax.set_title(title)
    return ax


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Print the CPU binding of a node layout (slurm/sites/*.env)."
    )
    parser.add_argument(
        "--site", required=True, metavar="FILE", help="site file with SITE_GPU_NUMA etc."
    )
    parser.add_argument(
        "--format",
        choices=("table", "mask_cpu", "map_cpu"),
        default="table",
        help="table (default): one line per local rank; mask_cpu/map_cpu: srun --cpu-bind value",
    )
    args = parser.parse_args(argv)
    try:
        values = read_site(args.site)
        layout = layout_from_site(values)
    except (OSError, ValueError, KeyError) as err:
        print(f"binding: cannot read a node layout from {args.site}: {err}", file=sys.stderr)
        return 2
    if layout is None:
        print(f"binding: {args.site} gives no SITE_GPU_NUMA: no masks to compute", file=sys.stderr)
        return 2
    if args.format == "mask_cpu":
        print(mask_cpu_option(layout))
    elif args.format == "map_cpu":
        print("map_cpu:" + ",".join(str(c) for c in map_cpu(layout)))
    else:
        print("\n".join(rank_table(layout, values.get("SITE_GPU_VISIBLE_VAR") or "GPU")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
