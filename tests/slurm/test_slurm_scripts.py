"""The Slurm scripts: syntax, shellcheck, and the dry runs that print the launch line and the binding."""

import glob
import os
import re
import subprocess

import pytest

from conftest import ROOT
from hvdcourse.runtime import binding
from hvdcourse.runtime.mpienv import launch_env

SCRIPTS = sorted(
    [
        os.path.relpath(p, ROOT)
        for p in glob.glob(os.path.join(ROOT, "slurm", "*"))
        if os.path.isfile(p)
    ]
    + ["tools/local_cluster_start.sh", "tools/local_cluster_stop.sh"]
)
SITE_FILES = sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "slurm", "sites", "*.env"))
)
GPU_SITES = {
    "lumi-g": ("ROCR_VISIBLE_DEVICES", 8),
    "gh200": ("CUDA_VISIBLE_DEVICES", 4),
    "nvidia-generic": ("CUDA_VISIBLE_DEVICES", 4),
}


def run(args, env=None, timeout=60):
    return subprocess.run(
        args,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=launch_env({"DRY_RUN": "1", **(env or {})}),
    )


def dry_run(*args, env=None):
    proc = run(["slurm/submit.sh", *args], env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_expected_scripts_exist():
    assert {
        "slurm/train.sbatch",
        "slurm/submit.sh",
        "slurm/lib.sh",
        "slurm/select-gpu",
        "slurm/interactive.sh",
        "slurm/jupyter.sbatch",
        "slurm/hostfile.sh",
    } <= set(SCRIPTS)
    assert {
        "slurm/sites/lumi-g.env",
        "slurm/sites/gh200.env",
        "slurm/sites/nvidia-generic.env",
        "slurm/sites/cpu.env",
    } <= set(SITE_FILES)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("script", SCRIPTS + SITE_FILES)
def test_script_parses_with_bash_n(script):
    proc = run(["bash", "-n", script])
    assert proc.returncode == 0, proc.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("script", SCRIPTS)
def test_script_passes_shellcheck(script):
    proc = run(["shellcheck", "-x", script])
    assert proc.returncode == 0, proc.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("site", SITE_FILES)
def test_site_file_passes_shellcheck_as_bash_data(site):
    # SC2034 (assigned but unused) is expected: the variables are read by slurm/lib.sh.
    proc = run(["shellcheck", "--shell=bash", "--exclude=SC2034", site])
    assert proc.returncode == 0, proc.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("site", sorted(GPU_SITES))
def test_gpu_dry_run_prints_the_srun_line_of_the_course_trainer(site):
    out = dry_run(site, "--", "--epochs", "2")
    srun = [line for line in out.splitlines() if line.startswith("[dry-run] srun ")]
    assert len(srun) == 1, out
    assert "--kill-on-bad-exit=1" in srun[0]
    # the PyTorch trainer: what each GPU site's build route builds (site file, SITE_TRAINER)
    assert srun[0].endswith(
        "python -m hvdcourse.examples.train_torch_hvd --checkpoint-dir checkpoints/hvd-train-JOBID"
        + (" --threads " + {"lumi-g": "7", "gh200": "72", "nvidia-generic": "8"}[site])
        + " --epochs 2"
    ), srun[0]
    assert "/slurm/select-gpu python" in srun[0]
    if site != "lumi-g":  # NVIDIA: one GPU per task, the one nearest its cores; the job's cores
        cpus = {"gh200": "72", "nvidia-generic": "8"}[site]
        assert f" --cpus-per-task={cpus} --gpus-per-task=1 --gpu-bind=single:1 " in srun[0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("site", sorted(GPU_SITES))
def test_gpu_sites_default_trainer_is_one_their_horovod_build_has(site):
    values = binding.read_site(os.path.join(ROOT, "slurm", "sites", f"{site}.env"))
    assert values["SITE_TRAINER"] == "train_torch_hvd"
    build = values["SITE_HOROVOD_BUILD"]
    # the GPU route (tools/setup_gpu.sh) builds PyTorch + NCCL, without TensorFlow
    assert build.endswith("tools/setup_gpu.sh") or "HOROVOD_WITH_PYTORCH=1" in build
    with open(os.path.join(ROOT, "tools", "setup_gpu.sh")) as fh:
        route = fh.read()
    assert "HOROVOD_WITH_PYTORCH=1" in route and "HOROVOD_WITHOUT_TENSORFLOW=1" in route


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "given, expected", [(["--cpus-per-task=2"], "--cpus-per-task=2 "), ([], None)]
)
def test_srun_gets_the_jobs_cpus_per_task(given, expected):
    # Slurm 22.05-23.02's srun does not inherit it from the job: the job script passes it on
    (srun,) = [
        line for line in dry_run("cpu", *given).splitlines() if line.startswith("[dry-run] srun ")
    ]
    if expected:
        assert f" {expected}" in srun, srun
    else:
        assert "--cpus-per-task" not in srun, srun


@pytest.mark.timeout(60)
@pytest.mark.parametrize("trainer", ["train_torch_hvd", "hvdcourse.examples.train_torch_hvd"])
def test_hvd_trainer_selects_the_pytorch_trainer_for_the_srun_line(trainer):
    out = dry_run("nvidia-generic", "--", "--epochs", "2", env={"HVD_TRAINER": trainer})
    (srun,) = [line for line in out.splitlines() if line.startswith("[dry-run] srun ")]
    assert srun.endswith(
        "/slurm/select-gpu python -m hvdcourse.examples.train_torch_hvd "
        "--checkpoint-dir checkpoints/hvd-train-JOBID --threads 8 --epochs 2"
    ), srun


@pytest.mark.timeout(60)
def test_a_trainer_that_srun_cannot_start_is_refused_before_submitting():
    proc = run(["slurm/submit.sh", "cpu"], env={"HVD_TRAINER": "train_torch_ddp"})
    assert proc.returncode == 2 and "[dry-run]" not in proc.stdout
    assert proc.stderr.strip() == (
        "[hvdcourse] ERROR: HVD_TRAINER=train_torch_ddp: this job runs one of train_hvd train_tape "
        "train_torch_hvd (srun gives them their ranks; DDP needs torchrun; train_ray_tf "
        "train_ray_torch run in slurm/ray.sbatch)"
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("site", sorted(GPU_SITES))
def test_gpu_site_says_how_horovod_is_built_for_pytorch_and_that_it_is_not_run_here(site):
    out = dry_run(site)
    (line,) = [line for line in out.splitlines() if "Horovod build for this site" in line]
    assert line.endswith("(a GPU build: not executed by the course, which has no GPU)")
    if site != "lumi-g":  # NVIDIA: the GPU route's variables, printed on the next line
        line = out.splitlines()[out.splitlines().index(line) + 1]
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in line and "HOROVOD_WITH_PYTORCH=1" in line
    with open(os.path.join(ROOT, "slurm", "sites", f"{site}.env")) as fh:
        text = fh.read()
    assert "NOT executed by the course" in text
    if site != "lumi-g":  # NVIDIA: where NCCL comes from (LUMI's RCCL comes with ROCm)
        assert "NCCL_HOME" in text and "nvidia.nccl" in text


@pytest.mark.timeout(60)
def test_cpu_site_names_the_build_that_make_env_does():
    out = dry_run("cpu")
    assert (
        "[dry-run] Horovod build for this site: HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_PYTORCH=1 "
        "HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1\n"
    ) in out
    with open(os.path.join(ROOT, "tools", "setup_env.sh")) as fh:
        setup = fh.read()
    for flag in ("HOROVOD_WITH_TENSORFLOW=1", "HOROVOD_WITH_MPI=1", "HOROVOD_WITH_GLOO=1"):
        assert flag in setup
    assert "TORCH_FLAG=HOROVOD_WITH_PYTORCH" in setup


@pytest.mark.timeout(60)
@pytest.mark.parametrize("site", sorted(GPU_SITES))
def test_gpu_dry_run_prints_one_gpu_per_local_rank(site):
    var, ranks = GPU_SITES[site]
    out = dry_run(site)
    lines = [line for line in out.splitlines() if re.match(r"\[binding\] local rank \d", line)]
    assert len(lines) == ranks, out
    if site == "nvidia-generic":  # no NUMA map: Slurm picks each task's GPU, next to its cores
        assert all(
            "one GPU, the closest to its cores (srun --gpu-bind=single:1)" in x for x in lines
        )
        return
    assert [re.search(rf"{var}=(\d)", line).group(1) for line in lines] == [
        str(r) for r in range(ranks)
    ], out


@pytest.mark.timeout(60)
def test_lumi_dry_run_binds_with_the_masks_of_its_numa_map():
    out = dry_run("lumi-g")
    option = re.search(r"--cpu-bind=(mask_cpu:\S+)", out).group(1)
    layout = binding.layout_from_site(
        binding.read_site(os.path.join(ROOT, "slurm", "sites", "lumi-g.env"))
    )
    masks = binding.parse_mask_list(option)
    numa_cpus = {n: layout.numa_cores(n) for n in range(4)}
    assert (
        binding.check_masks(
            masks, dict(enumerate(layout.gpu_numa)), numa_cpus, reserved=range(0, 64, 8)
        )
        == []
    )
    for rank, mask in enumerate(masks):  # the table a learner reads shows the same masks
        assert re.search(rf"local rank {rank}: .* mask {hex(mask)}$", out, re.M), out


@pytest.mark.timeout(60)
def test_dry_run_prints_the_sbatch_line_with_the_sites_resources_then_the_users():
    out = dry_run("lumi-g", "--account=project_1", "--nodes=4")
    sbatch = out.splitlines()[0]
    assert sbatch.startswith(
        "[dry-run] sbatch --partition=standard-g --nodes=2 --ntasks-per-node=8 --gpus-per-node=8"
    )
    # the user's option comes last and wins
    assert sbatch.index("--nodes=2") < sbatch.index("--nodes=4")
    assert "--account=project_1" in sbatch and sbatch.endswith("slurm/train.sbatch")


@pytest.mark.timeout(60)
def test_dry_run_follows_the_users_tasks_per_node():
    out = dry_run("nvidia-generic", "--ntasks-per-node=2")
    assert "[binding] 2 rank(s) per node" in out
    assert "--cpu-bind=cores" in out


@pytest.mark.timeout(60)
def test_cpu_dry_run_has_no_gpu_wrapper_and_no_binding():
    out = dry_run("cpu")
    assert "select-gpu" not in out and "--cpu-bind" not in out
    assert "local rank 0: no GPU" in out


@pytest.mark.timeout(60)
def test_unknown_site_says_which_sites_exist():
    proc = run(["slurm/submit.sh", "no-such-site"])
    assert proc.returncode == 2
    assert "no site file" in proc.stderr and "lumi-g" in proc.stderr


@pytest.mark.timeout(60)
def test_interactive_dry_run_prints_the_salloc_line():
    proc = run(
        ["slurm/interactive.sh", "gh200", "--time=00:10:00", "--", "bash", "slurm/train.sbatch"]
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (
        "[dry-run] salloc --nodes=2 --ntasks-per-node=4 --gpus-per-task=1 "
        "--cpus-per-task=72 --exclusive --time=00:10:00 bash slurm/train.sbatch"
    )


@pytest.mark.timeout(60)
def test_jupyter_dry_run_keeps_the_token_off_the_command_line():
    proc = run(["bash", "slurm/jupyter.sbatch"])
    assert proc.returncode == 0, proc.stderr
    assert re.search(
        r"JUPYTER_TOKEN=<random> jupyter lab --no-browser --ip=\S+ --port=\d+", proc.stdout
    )
    assert "token=" not in proc.stdout.split("jupyter lab", 1)[1]


@pytest.mark.timeout(30)
def test_select_gpu_gives_the_rank_the_gpu_of_its_local_id():
    proc = run(
        ["slurm/select-gpu", "printenv", "ROCR_VISIBLE_DEVICES"],
        env={"SLURM_LOCALID": "5", "SITE_GPU_VISIBLE_VAR": "ROCR_VISIBLE_DEVICES"},
    )
    assert proc.returncode == 0 and proc.stdout == "5\n", proc.stderr


def select_gpu(**env):
    """slurm/select-gpu in an environment of its own: (exit code, CUDA_VISIBLE_DEVICES, stderr)."""
    base = {k: v for k, v in launch_env().items() if not k.endswith("_VISIBLE_DEVICES")}
    proc = subprocess.run(
        ["slurm/select-gpu", "bash", "-c", 'echo "${CUDA_VISIBLE_DEVICES-unset}"'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
        env={**base, "SITE_GPU_VISIBLE_VAR": "CUDA_VISIBLE_DEVICES", **env},
    )
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


@pytest.mark.timeout(30)
def test_select_gpu_keeps_the_one_gpu_slurm_bound_the_task_to():
    # srun --gpus-per-task=1 --gpu-bind=single:1 gave local rank 0 the GPU next to its cores, GPU 2
    assert select_gpu(SLURM_LOCALID="0", CUDA_VISIBLE_DEVICES="2") == (0, "2", "")


@pytest.mark.timeout(30)
def test_select_gpu_takes_its_local_ids_entry_of_the_nodes_gpus():
    assert select_gpu(SLURM_LOCALID="1", CUDA_VISIBLE_DEVICES="4,5,6,7") == (0, "5", "")
    assert select_gpu(SLURM_LOCALID="3", SLURM_GPUS_ON_NODE="4") == (0, "3", "")


@pytest.mark.timeout(30)
def test_select_gpu_stops_a_rank_beyond_the_nodes_gpus_in_one_line():
    code, out, err = select_gpu(SLURM_LOCALID="4", CUDA_VISIBLE_DEVICES="0,1,2,3")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert (
        err.startswith("[hvdcourse] ERROR: local rank 4 but 4 GPU(s)") and "HVD_SHARE_GPU=1" in err
    )


@pytest.mark.timeout(30)
def test_select_gpu_shares_gpus_when_asked_and_says_what_it_costs():
    code, out, err = select_gpu(
        SLURM_LOCALID="4", CUDA_VISIBLE_DEVICES="0,1,2,3", HVD_SHARE_GPU="1"
    )
    assert (code, out) == (0, "0")
    assert "Duplicate GPU detected" in err and "without HOROVOD_GPU_OPERATIONS" in err
    assert select_gpu(SLURM_LOCALID="5", CUDA_VISIBLE_DEVICES="0,1,2,3", HVD_SHARE_GPU="1") == (
        0,
        "1",
        "",
    )  # only the first rank to share says it


@pytest.mark.timeout(30)
def test_select_gpu_outside_srun_says_so():
    env = {k: v for k, v in launch_env().items() if k != "SLURM_LOCALID"}
    proc = subprocess.run(
        ["slurm/select-gpu", "true"], cwd=ROOT, capture_output=True, text=True, timeout=20, env=env
    )
    assert proc.returncode != 0 and "runs under srun" in proc.stderr


@pytest.mark.timeout(60)
def test_a_ray_trainer_submits_the_ray_job_which_starts_a_ray_cluster_before_the_script():
    out = dry_run("cpu", "--", "--epochs", "2", env={"HVD_TRAINER": "train_ray_tf"})
    lines = out.splitlines()
    assert lines[0].startswith("[dry-run] sbatch ") and lines[0].endswith(
        "slurm/ray.sbatch --epochs 2"
    )
    head, workers = [line for line in lines if line.startswith("[dry-run] srun ")]
    assert "-w NODE1" in head and "ray start --head" in head
    assert "--include-dashboard=false" in head and "--num-cpus=1 " in head and "--block" in head
    assert "--exclude=NODE1" in workers and "ray start --address=HEAD_IP:PORT" in workers
    python = "[dry-run] python -m hvdcourse.examples.train_ray_tf --address HEAD_IP:PORT --workers"
    assert lines.index(f"{python} NODES --epochs 2") > lines.index(workers)
