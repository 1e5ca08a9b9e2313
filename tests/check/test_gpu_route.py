"""The GPU route (tools/setup_gpu.sh, `make gpu`) and its check (`hvdcourse-check --gpu`), tested on a
CPU machine: its patch set applies to Horovod's source, what is missing is said in one line each,
the NVIDIA site files' dry runs give the route's build variables, the record's format, and what the
lessons show with and without a record. The GPU run itself needs a GPU (lesson: Installing Horovod)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from hvdcourse.course.check import gpu

SETUP_GPU = os.path.join(ROOT, "tools", "setup_gpu.sh")
PATCH_SCRIPT = os.path.join(ROOT, "tools", "patch_horovod.sh")
PATCH_DIR = os.path.join(ROOT, "patches", "horovod-0.28.1")
COMMITTED_RECORD = os.path.join(ROOT, "book", "data", "gpu_record.json")
# the tools setup_gpu.sh calls, from this machine; nvidia-smi and nvcc only as the tests' fakes
TOOLS = ["bash", "uname", "cut", "tr", "sort", "paste", "dirname", "readlink", "sed", "awk", "ls"]
TOOLS += ["cat", "sha256sum", "head", "grep", "nproc", "mpirun", "mpicc", "g++", "cmake", "env"]


# --- The patch set -------------------------------------------------------------------------------------


def test_gpu_patches_apply_to_horovods_source_after_the_cpu_ones(horovod_source, tmp_path):
    tree = tmp_path / "horovod-0.28.1"
    shutil.copytree(horovod_source, tree)
    first = subprocess.run(
        ["bash", PATCH_SCRIPT, str(tree), "gpu"], capture_output=True, text=True, timeout=60
    )
    assert first.returncode == 0, first.stderr
    lines = first.stdout.strip().splitlines()
    cpu = sorted(f for f in os.listdir(PATCH_DIR) if f.endswith(".patch"))
    gpu_only = sorted("gpu/" + f for f in os.listdir(os.path.join(PATCH_DIR, "gpu")))
    assert [": ".join(line.split(": ")[:2]) for line in lines] == [
        f"patch_horovod: applied {name}" for name in cpu + gpu_only
    ]
    cuda = (tree / "horovod" / "common" / "ops" / "cuda" / "CMakeLists.txt").read_text()
    assert "set(CMAKE_CUDA_STANDARD 17)" in cuda and "CMAKE_CUDA_STANDARD 11" not in cuda
    again = subprocess.run(
        ["bash", PATCH_SCRIPT, str(tree), "gpu"], capture_output=True, text=True, timeout=60
    )
    assert again.stdout.count("already applied") == len(cpu + gpu_only), again.stdout


def test_each_gpu_patch_says_why():
    for name in os.listdir(os.path.join(PATCH_DIR, "gpu")):
        header = open(os.path.join(PATCH_DIR, "gpu", name)).read().split("\n--- a/")[0]
        assert header.splitlines()[1].startswith("Why: "), name


def patch_hash(*sets):
    script = f"ROOT={ROOT}; source {ROOT}/tools/setup_lib.sh; patch_hash {' '.join(sets)}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout.strip()


def test_the_cpu_wheel_key_ignores_the_gpu_patches():
    # the CPU build's key before the GPU route existed: the top folder's *.patch only
    top = subprocess.run(
        f"cat {PATCH_DIR}/*.patch | sha256sum | cut -c1-8",
        shell=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert patch_hash() == top and patch_hash("gpu") != top


# --- Detection: one line per missing piece, exit 2 ----------------------------------------------------


def fake_machine(
    tmp_path, gpus="NVIDIA H100 80GB HBM3, 9.0, 580.65.06", cuda="13.0", torch_cuda="13.0"
):
    """A PATH with the real tools, plus fakes: nvidia-smi (``gpus=None``: none; ``""``: no device),
    a CUDA toolkit (``cuda=None``: none), NCCL's wheel folder, a torch package (``torch_cuda=None``:
    a CPU build). Returns the environment for setup_gpu.sh."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        if shutil.which(tool):
            os.symlink(shutil.which(tool), bin_dir / tool)
    if gpus is not None:
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '%s' '{gpus}'\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "HVDCOURSE_CACHE": str(tmp_path / "cache")}
    env["PYTHON"] = sys.executable
    env["GPU_VENV"] = str(tmp_path / "no-venv")
    env["CUDA_HOME"] = str(tmp_path / "cuda")
    if cuda is not None:
        (tmp_path / "cuda" / "bin").mkdir(parents=True)
        nvcc = tmp_path / "cuda" / "bin" / "nvcc"
        nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {cuda}, V{cuda}.88'\n")
        nvcc.chmod(0o755)
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text("")
    version = "2.11.0+cu130" if torch_cuda else "2.11.0+cpu"
    cuda_line = f"cuda: Optional[str] = '{torch_cuda}'" if torch_cuda else "cuda = None"
    (site / "torch" / "version.py").write_text(f"__version__ = '{version}'\n{cuda_line}\n")
    if torch_cuda:
        nccl = site / "nvidia" / "nccl"
        (nccl / "include").mkdir(parents=True)
        (nccl / "lib").mkdir()
        (nccl / "include" / "nccl.h").write_text(
            "#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n"
        )
        (nccl / "lib" / "libnccl.so.2").write_text("")
    env["PYTHONPATH"] = str(site)
    return env


def setup_gpu(env, *args):
    return subprocess.run(
        ["bash", SETUP_GPU, *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_a_cpu_machine_gets_one_line_per_missing_piece_and_exit_2(tmp_path):
    proc = setup_gpu(fake_machine(tmp_path, gpus=None, cuda=None, torch_cuda=None))
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert [line.split(":")[1].strip() for line in lines] == [
        "no NVIDIA GPU",
        "no CUDA toolkit",
        "PyTorch 2.11.0+cpu for " + sys.executable + " is a CPU build (torch.version.cuda is None)",
        "no NCCL headers",
    ], lines
    assert "nvidia-smi not found" in lines[0] and "CUDA_HOME" in lines[1]
    assert "NCCL_HOME" in lines[3]
    assert not (tmp_path / "no-venv").exists()  # nothing built or created


def test_a_driver_without_a_device_and_a_toolkit_of_another_cuda_are_named(tmp_path):
    proc = setup_gpu(fake_machine(tmp_path, gpus="", cuda="12.4"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, lines
    assert "nvidia-smi lists no device" in lines[0]
    assert "built for CUDA 13.0 but the toolkit" in lines[1] and "CUDA 12.4" in lines[1]


def build_variables(out: str) -> list:
    """The indented lines under ``build variables:`` in setup_gpu.sh's dry run."""
    lines = out.splitlines()
    variables = []
    for line in lines[lines.index("build variables:") + 1 :]:
        if not line.startswith("  "):
            break
        variables.append(line.strip())
    return variables


def test_dry_run_on_a_gpu_machine_prints_the_exact_build_and_its_key(tmp_path):
    env = fake_machine(tmp_path)
    proc = setup_gpu(env, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "missing:" not in proc.stdout
    nccl = os.path.join(env["PYTHONPATH"], "nvidia", "nccl")
    variables = setup_gpu(env, "--print-vars").stdout.split()
    assert variables == [
        "HOROVOD_GPU_OPERATIONS=NCCL",
        f"HOROVOD_CUDA_HOME={tmp_path / 'cuda'}",
        f"HOROVOD_NCCL_INCLUDE={nccl}/include",
        # the unversioned link goes to the cache, not into the NCCL package
        f"HOROVOD_NCCL_LIB={variables[3].split('=')[1]}",
        "HOROVOD_NCCL_LINK=SHARED",
        "HOROVOD_BUILD_CUDA_CC_LIST=90",
        "HOROVOD_WITH_PYTORCH=1",
        "HOROVOD_WITHOUT_TENSORFLOW=1",
        "HOROVOD_WITHOUT_MXNET=1",
        "HOROVOD_WITH_GLOO=1",
        "HOROVOD_WITH_MPI=1" if shutil.which("mpicc") else "HOROVOD_WITHOUT_MPI=1",
        "CMAKE_POLICY_VERSION_MINIMUM=3.5",
        f"MAKEFLAGS=-j{len(os.sched_getaffinity(0))}",  # nproc
    ]
    assert variables[3].startswith(f"HOROVOD_NCCL_LIB={tmp_path / 'cache' / 'nccl' / '2.28.9-'}")
    assert build_variables(proc.stdout) == variables
    assert "patches/horovod-0.28.1/gpu/01-cuda-cxx17.patch" in proc.stdout
    (key,) = [line for line in proc.stdout.splitlines() if line.startswith("wheel cache: ")]
    assert "-gpu-py%d.%d-torch2.11.0+cu130-cuda13.0-nccl2.28.9-cc90-" % sys.version_info[:2] in key
    assert key.endswith("-patches" + patch_hash("gpu"))


def test_a_sites_nccl_replaces_torchs(tmp_path):
    env = fake_machine(tmp_path)
    site_nccl = tmp_path / "nccl-site"
    (site_nccl / "include").mkdir(parents=True)
    (site_nccl / "lib").mkdir()
    (site_nccl / "include" / "nccl.h").write_text(
        "#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n"
    )
    (site_nccl / "lib" / "libnccl.so").write_text("")
    variables = setup_gpu({**env, "NCCL_HOME": str(site_nccl)}, "--print-vars").stdout.split()
    assert f"HOROVOD_NCCL_INCLUDE={site_nccl}/include" in variables
    assert f"HOROVOD_NCCL_LIB={site_nccl}/lib" in variables  # it has libnccl.so: used as it is


def site_build(site: str) -> list:
    with open(os.path.join(ROOT, "slurm", "sites", f"{site}.env")) as fh:
        (line,) = [line for line in fh if line.startswith("SITE_HOROVOD_BUILD=")]
    return line.split("=", 1)[1].strip().strip('"').split()


@pytest.mark.parametrize("site", ["nvidia-generic", "gh200"])
def test_gpu_sites_dry_run_gives_the_routes_build_variables(site):
    words = site_build(site)
    assert words[-1] == "tools/setup_gpu.sh"  # the site builds by the route, with its values
    site_env = dict(word.split("=", 1) for word in words[:-1])
    submit = subprocess.run(
        [os.path.join(ROOT, "slurm", "submit.sh"), site],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DRY_RUN": "1"},
        cwd=ROOT,
    )
    assert submit.returncode == 0, submit.stderr
    (line,) = [x for x in submit.stdout.splitlines() if "its build variables here:" in x]
    route = setup_gpu({**os.environ, **site_env}, "--dry-run")
    assert line.split("its build variables here: ")[1].split() == build_variables(route.stdout)
    assert f"HOROVOD_CUDA_HOME={site_env['CUDA_HOME']}" in line
    # and the build exports exactly the variables that the dry runs print
    assert 'export "${BUILD_VARS[@]}"' in open(SETUP_GPU).read()


# --- The check -----------------------------------------------------------------------------------------


def run_check(path_dir, *args):
    return subprocess.run(
        [sys.executable, "-m", "hvdcourse.course.check.envcheck", "--gpu", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": str(path_dir)},
    )


def test_gpu_check_without_a_gpu_says_so_in_one_line(tmp_path):
    proc = run_check(tmp_path, "--record", str(tmp_path / "r.json"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().startswith("hvdcourse: error: no GPU: nvidia-smi not found.")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


def test_gpu_check_with_a_cpu_build_of_torch_says_to_use_the_routes_venv(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 580.65.06'\n")
    smi.chmod(0o755)
    proc = run_check(tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "is a CPU build: run 'make gpu'" in proc.stderr and ".venv-gpu" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_horovod_ranks_report_images_per_second_and_a_timeline(tmp_path):
    # the ranks' code of the check, on this machine's CPU (check() itself insists on a GPU)
    timeline = str(tmp_path / "timeline.json")
    run = gpu._launch(1, 2, (8, 16), 180, timeline)
    assert run.ok, run.output[-3000:]
    rates = run.records("throughput")
    assert [r["batch_size"] for r in rates] == [8, 16]
    assert all(r["images_per_second"] > 0 for r in rates)
    phases = gpu.nccl_phases(timeline)
    assert "BROADCAST" in phases and all(ms >= 0 for ms in phases.values())


def test_one_gpu_advice_names_nccls_refusal_and_both_ways_out():
    text = gpu.one_gpu_advice()
    assert "Duplicate GPU detected" in text and "one rank per GPU" in text
    assert "without HOROVOD_GPU_OPERATIONS" in text
    assert "the probe in the course's environment notes" in text  # the figure's source, not ours


# --- The record and the lessons ------------------------------------------------------------------------


def example_record() -> dict:
    """A made-up record: a fixture of the format only (the course's data is book/data/gpu_record.json)."""
    return {
        "date": "2030-01-02",
        "device": "Example GPU",
        "gpus": 1,
        "driver": "1.0",
        "cuda": "9.9",
        "nccl": "9.9.9",
        "torch": "0.0.0+example",
        "python": "3.12.0",
        "horovod": "0.28.1",
        "built_with": {"PyTorch": True, "NCCL": True, "Gloo": True, "MPI": False, "CUDA": True},
        "build": {"seconds": 111},
        "steps": 7,
        "throughput": [
            {
                "batch_size": 8,
                "plain_images_per_second": 1000.4,
                "horovod_images_per_second": 900.6,
                "horovod_ranks": 1,
            },
            {
                "batch_size": 16,
                "plain_images_per_second": 2000.0,
                "horovod_images_per_second": 1900.0,
                "horovod_ranks": 1,
            },
        ],
        "timeline_phases": {"NCCL_BCAST": 1.25, "BROADCAST": 2.5},
        "shared_gpu": "refused by NCCL: example",
        "format": gpu.RECORD_FORMAT,
    }


def test_a_complete_record_is_valid_and_reads_back():
    record = gpu.GpuRecord.from_dict(example_record())
    assert record.throughput[1].horovod_images_per_second == 1900.0
    assert record.to_dict() == example_record()


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"date": "yesterday"}, "not an ISO date"),
        ({"gpus": "1"}, "'gpus' must be int"),
        ({"built_with": {"PyTorch": True, "NCCL": False}}, "built_with['NCCL'] must be true"),
        ({"throughput": []}, "'throughput' is empty"),
        ({"format": 99}, "format 99"),
        ({"device": " "}, "'device' is empty"),
    ],
)
def test_a_broken_record_is_refused_with_the_reason(change, problem):
    problems = gpu.validate_record({**example_record(), **change})
    assert any(problem in p for p in problems), problems


def test_a_record_without_a_figure_is_refused():
    data = example_record()
    del data["throughput"][0]["plain_images_per_second"]
    assert "throughput[0] must have exactly" in gpu.validate_record(data)[0]
    data = example_record()
    data.pop("nccl")
    assert gpu.validate_record(data) == ["missing field 'nccl'"]


def test_lessons_show_the_records_figures_and_machine(tmp_path):
    path = tmp_path / "gpu_record.json"
    path.write_text(json.dumps(example_record()))
    text = gpu.lesson_markdown(str(path))
    assert text.startswith("Run by the course on 1 x Example GPU (driver 1.0, CUDA 9.9, NCCL 9.9.9")
    assert "| 8 | 1,000 | 901 |" in text and "| 16 | 2,000 | 1,900 |" in text
    assert "compiled it in 111 s" in text and "NCCL_BCAST 1.2 ms" in text
    assert "multi-GPU NCCL rings" in text and "ROCm/RCCL" in text and "TensorFlow on GPUs" in text
    brief = gpu.lesson_markdown(str(path), brief=True)
    assert "| 16 | 2,000 | 1,900 |" in brief and "compiled" not in brief


def test_lessons_say_plainly_when_the_route_was_not_run(tmp_path):
    text = gpu.lesson_markdown(str(tmp_path / "gpu_record.json"))
    assert text.startswith("The GPU route has not been run by the course yet")
    assert all(f"`{command}`" in text for command in gpu.COMMANDS)
    assert "multi-GPU NCCL rings" in text and "ROCm/RCCL" in text and "TensorFlow on GPUs" in text
    assert "|" not in text  # no table, no figure


def test_the_committed_data_is_what_the_lessons_read():
    text = gpu.lesson_markdown(COMMITTED_RECORD)
    if os.path.exists(COMMITTED_RECORD):
        assert gpu.validate_record(json.load(open(COMMITTED_RECORD))) == []
        assert text.startswith("Run by the course on ")
    else:
        assert text.startswith("The GPU route has not been run by the course yet")
