"""The job scripts, run by a real Slurm: the local 2-node cluster (hvdcourse.course.services.slurm_cluster) started
once for this session and always stopped at its end.

Lesson 08, in the book build, submits the Keras job on two nodes and a job with a bad argument on its
own local cluster and asserts what these tests asserted of the same jobs (completed on node[1-2] with
identical weights, the srun line logged, rank 0's checkpoints in the job's folder; FAILED with the
usage message and no traceback); they are not submitted here again."""

import os
import re
import shlex
import subprocess
import time
import urllib.error
import urllib.request

import psutil
import pytest

from conftest import ROOT
from hvdcourse.runtime import processes
from hvdcourse.runtime.launch import run_ranks

SUBMIT = os.path.join(ROOT, "slurm", "submit.sh")
# 2 epochs of 5 steps: enough to prove that the ranks train together, each job well under a minute.
QUICK = [
    "--epochs",
    "2",
    "--max-steps",
    "5",
    "--batch-size",
    "32",
    "--warmup-epochs",
    "0",
    "--no-resume",
]
# Slurm stops any of these jobs after 15 minutes (a hang guard: a job of a minute on a quiet machine
# passed the requeue signal, 2 minutes before a 5-minute limit, at load 20); pytest's timeouts are
# set above the jobs' needs.
LIMIT = "--time=15"
RANK_LINE = re.compile(
    r"\[train_hvd\] rank=(\d+) test_loss=\S+ test_accuracy=\S+ weights_sha256=(\w+)"
)


def submit(cluster, cwd, sbatch_options, trainer_args, env=None, timeout=900):
    """slurm/submit.sh cpu --wait ... -- trainer args: the way a learner submits, waiting for the end."""
    return cluster.submit(
        [SUBMIT, "cpu", "--wait", "--parsable", LIMIT, *sbatch_options, "--", *trainer_args],
        cwd=str(cwd),
        timeout=timeout,
        env=env,
    )


def rank_digests(job):
    return {int(rank): digest for rank, digest in RANK_LINE.findall(job.output)}


@pytest.fixture(scope="module")
def one_node_job(local_cluster, tmp_path_factory):
    # The local nodes have 1 CPU each: 2 tasks on one node need --overcommit (and Slurm 22.05 then
    # accepts --ntasks=2, not --ntasks-per-node=2: "Requested node configuration is not available").
    return submit(
        local_cluster,
        tmp_path_factory.mktemp("one_node"),
        ["--nodes=1", "--ntasks=2", "--overcommit"],
        QUICK,
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "shape, nodes, node_list",
    [("one_node_job", "1", "node1")],  # two nodes: lesson 08 (above)
)
def test_two_ranks_train_to_identical_weights(request, shape, nodes, node_list):
    job = request.getfixturevalue(shape)
    assert job.state == "COMPLETED" and job.exit_code == "0:0", job.output[-3000:]
    assert (job.info["NumNodes"], job.info["NumTasks"], job.info["NodeList"]) == (
        nodes,
        "2",
        node_list,
    )
    digests = rank_digests(job)
    assert sorted(digests) == [0, 1], job.output[-3000:]
    assert digests[0] == digests[1]


TORCH_RANK_LINE = re.compile(
    r"\[train_torch_hvd\] rank=(\d+) test_loss=\S+ test_accuracy=\S+ weights_sha256=(\w+)"
)


@pytest.fixture(scope="module")
def torch_two_nodes_job(local_cluster, tmp_path_factory):
    # HVD_TRAINER picks the PyTorch trainer; everything else is the Keras job's
    return submit(
        local_cluster,
        tmp_path_factory.mktemp("torch_two_nodes"),
        ["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=1"],
        QUICK,
        env={"HVD_TRAINER": "train_torch_hvd"},
    )


@pytest.mark.timeout(300)
def test_pytorch_trainer_runs_on_two_nodes_to_identical_weights(torch_two_nodes_job):
    job = torch_two_nodes_job
    assert job.state == "COMPLETED" and job.exit_code == "0:0", job.output[-3000:]
    assert (job.info["NumNodes"], job.info["NumTasks"], job.info["NodeList"]) == (
        "2",
        "2",
        "node[1-2]",
    )
    assert re.search(r"^\[hvdcourse\] job \d+ on node\[1-2\], site cpu", job.output, re.M)
    assert re.search(r"^\[train_torch_hvd\] .* ranks=2 threads/rank=1 ", job.output, re.M)
    digests = dict(TORCH_RANK_LINE.findall(job.output))
    assert sorted(digests) == ["0", "1"], job.output[-3000:]
    assert digests["0"] == digests["1"]


@pytest.mark.timeout(300)
def test_pytorch_job_runs_the_srun_line_of_the_pytorch_trainer_and_checkpoints(torch_two_nodes_job):
    job = torch_two_nodes_job
    assert re.search(
        r"^\[hvdcourse\] srun --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=1 python -m "
        r"hvdcourse.examples.train_torch_hvd --checkpoint-dir checkpoints/hvd-train-\d+ --threads 1",
        job.output,
        re.M,
    )
    folder = os.path.join(job.info["WorkDir"], "checkpoints", f"hvd-train-{job.job_id}")
    assert sorted(os.listdir(folder)) == ["epoch-1.pt", "epoch-2.pt"]


@pytest.mark.timeout(240)
def test_a_crashing_rank_fails_the_job_instead_of_hanging_it(local_cluster, tmp_path):
    crash = {
        "PYTHONPATH": os.path.join(ROOT, "tests", "helpers", "crash_rank"),
        "HVDCOURSE_CRASH_RANK": "1",
    }
    job = submit(
        local_cluster,
        tmp_path,
        ["--nodes=2"],
        ["--epochs", "50", "--no-resume"],
        env=crash,
        timeout=220,
    )
    assert job.state == "FAILED", job.output[-3000:]  # not TIMEOUT: srun stopped rank 0 at once
    assert "[crash-test] rank 1 exits with status 3 on purpose" in job.output
    assert "task 1: Exited with exit code 3" in job.output
    assert not RANK_LINE.search(job.output)  # nobody finished training


@pytest.mark.timeout(180)
def test_sigusr1_before_the_time_limit_requeues_the_job(local_cluster, tmp_path):
    env = local_cluster.env()
    proc = subprocess.run(
        [SUBMIT, "cpu", "--parsable", LIMIT, "--nodes=1", "--", "--epochs", "50", "--no-resume"],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().split(";")[0]
    log = tmp_path / f"hvd-train-{job_id}.out"
    try:
        wait_for(
            lambda: log.exists() and "[binding]" in log.read_text(),
            90,
            "the job script did not start",
        )
        # what --signal=B:USR1@120 sends
        local_cluster.command(["scancel", "--signal=USR1", "--batch", job_id])
        wait_for(
            lambda: local_cluster.job_info(int(job_id)).get("Restarts") == "1",
            60,
            "the job was not requeued",
        )
        assert f"time limit near: requeueing job {job_id} (restart 1 of 3)" in log.read_text()
    finally:
        local_cluster.command(["scancel", job_id], check=False)


@pytest.mark.timeout(240)
def test_interactive_allocation_runs_the_job_scripts_srun_line(local_cluster, tmp_path):
    run = run_ranks(
        [
            os.path.join(ROOT, "slurm", "interactive.sh"),
            "cpu",
            "--nodes=1",
            LIMIT,
            "--",
            "bash",
            os.path.join(ROOT, "slurm", "train.sbatch"),
            *QUICK,
        ],
        np=1,
        launcher="python",
        timeout=220,
        env=local_cluster.env(),
        cwd=str(tmp_path),
    )
    assert run.ok, run.output[-3000:]
    assert re.search(r"salloc: Granted job allocation \d+", run.output)
    assert sorted(int(r) for r, _ in RANK_LINE.findall(run.output)) == [0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "shape, expected",
    [
        (["--nodes=2"], "node1 slots=1\nnode2 slots=1\n"),
        (["--nodes=1", "--ntasks=2", "--overcommit"], "node1 slots=2\n"),
    ],
)
def test_hostfile_lists_the_allocations_nodes_with_their_slots(
    local_cluster, tmp_path, shape, expected
):
    run = run_ranks(
        [
            os.path.join(ROOT, "slurm", "interactive.sh"),
            "cpu",
            *shape,
            "--time=1",
            "--",
            os.path.join(ROOT, "slurm", "hostfile.sh"),
        ],
        np=1,
        launcher="python",
        timeout=100,
        env=local_cluster.env(),
        cwd=str(tmp_path),
    )
    assert run.ok, run.output
    assert "".join(line + "\n" for line in run.output.splitlines() if "slots=" in line) == expected


@pytest.mark.timeout(60)
def test_hostfile_expands_slurms_compressed_task_counts(local_cluster):
    env = local_cluster.env({"SLURM_JOB_NODELIST": "gpu[07-09]", "SLURM_TASKS_PER_NODE": "4(x2),2"})
    proc = subprocess.run(
        [os.path.join(ROOT, "slurm", "hostfile.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.stdout == "gpu07 slots=4\ngpu08 slots=4\ngpu09 slots=2\n", proc.stderr


@pytest.mark.timeout(120)
def test_select_gpu_under_srun_numbers_gpus_by_rank_on_the_node(local_cluster, tmp_path):
    proc = local_cluster.command(
        [
            "srun",
            "--nodes=1",
            "--ntasks=2",
            "--overcommit",
            "--label",
            "--time=1",
            os.path.join(ROOT, "slurm", "select-gpu"),
            "printenv",
            "CUDA_VISIBLE_DEVICES",
        ],
        cwd=str(tmp_path),
        timeout=100,
    )
    assert sorted(proc.stdout.split("\n")[:2]) == ["0: 0", "1: 1"], proc.stdout + proc.stderr


# what each rank of a step started with the job scripts' srun options prints: its CPUs and mask
RANK_CPUS = (
    'echo "rank $SLURM_PROCID on $SLURMD_NODENAME: cpus-per-task=${SLURM_CPUS_PER_TASK:-unset} '
    '$(grep Cpus_allowed_list /proc/self/status | tr -s "\t" " ")"'
)


@pytest.mark.timeout(120)
def test_each_rank_of_the_job_step_gets_the_jobs_cpus_per_task(local_cluster, tmp_path):
    # the srun options of slurm/lib.sh inside an allocation of --cpus-per-task=1: srun passes it on
    # (Slurm 22.05-23.02 would not), and each rank shows its CPU count and CPU mask
    script = f'source {ROOT}/slurm/lib.sh; use_site cpu; echo "srun ${{SRUN_OPTS[*]}}"; '
    script += f'srun "${{SRUN_OPTS[@]}}" bash -c {shlex.quote(RANK_CPUS)}'
    proc = local_cluster.command(
        [
            os.path.join(ROOT, "slurm", "interactive.sh"),
            "cpu",
            "--nodes=2",
            "--cpus-per-task=1",
            "--time=1",
            "--",
            "bash",
            "-c",
            script,
        ],
        cwd=str(tmp_path),
        timeout=100,
    )
    assert "srun --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=1" in proc.stdout, proc.stdout
    ranks = re.findall(
        r"^rank (\d) on (node\d): cpus-per-task=(\S+) Cpus_allowed_list: (\S+)$", proc.stdout, re.M
    )
    print("\n".join(" ".join(rank) for rank in ranks))  # the record: each rank's CPUs and mask
    assert sorted((r, node, cpus) for r, node, cpus, _ in ranks) == [
        ("0", "node1", "1"),
        ("1", "node2", "1"),
    ], proc.stdout + proc.stderr
    # this cluster runs without Slurm's task-affinity plugin: the mask is the machine's CPUs
    assert all(re.fullmatch(r"[\d,-]+", mask) for *_, mask in ranks)


@pytest.mark.timeout(120)
def test_allreduce_bandwidth_check_runs_across_both_nodes(local_cluster, tmp_path):
    # a cluster user's interconnect check, one rank per node; 2 sizes x 3 calls keep it short
    proc = local_cluster.command(
        [
            "srun",
            "--nodes=2",
            "--ntasks-per-node=1",
            "--mpi=pmix",
            "--kill-on-bad-exit=1",
            "--time=2",
            "python",
            "-m",
            "hvdcourse.course.check.envcheck",
            "--allreduce-bandwidth",
            "--sizes",
            "4K,1M",
            "--iters",
            "3",
        ],
        cwd=str(tmp_path),
        timeout=110,
        env=local_cluster.env({"PYTHONPATH": ROOT}),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert (
        "with Horovod: 2 rank(s) on 2 node(s) (node1, node2); tensors in host memory (CPU)" in out
    )
    assert re.search(r"; (MPI|Gloo) operations; 3 timed calls per size$", out, re.M), out
    rows = re.findall(r"^\s+(\d+ [KM]iB)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert [size for size, *_ in rows] == ["4 KiB", "1 MiB"], out
    for size, micros, algbw, busbw in rows:
        assert float(micros) > 0 and float(algbw) > 0
        assert float(busbw) == pytest.approx(float(algbw), abs=0.002)  # 2(n-1)/n = 1 on 2 ranks
    assert re.search(r"fitted: alpha = [\d.]+ us, 1/beta = ([\d.]+ GB/s|not resolved)", out), out


@pytest.mark.timeout(180)
def test_jupyterlab_job_answers_only_with_its_token(local_cluster, tmp_path):
    # as if submitted from the course folder
    env = local_cluster.env({"HVDCOURSE_ROOT": ROOT, "HVD_SITE": "cpu"})
    job_id = (
        local_cluster.command(
            ["sbatch", "--parsable", "--time=3", os.path.join(ROOT, "slurm", "jupyter.sbatch")],
            cwd=str(tmp_path),
            env=env,
        )
        .stdout.strip()
        .split(";")[0]
    )
    info, log = tmp_path / f"jupyter-{job_id}.url", tmp_path / f"jupyter-{job_id}.out"
    try:
        wait_for(
            lambda: (
                info.exists()
                or local_cluster.job_info(int(job_id))["JobState"] != "RUNNING"
                and log.exists()
            ),
            60,
            "the job wrote no connection file",
        )
        assert info.exists(), log.read_text()
        text = info.read_text()
        assert oct(info.stat().st_mode & 0o777) == "0o600"  # it holds the token
        tunnel = re.search(r"^ssh -N -L 8888:(\S+):(\d+) ", text, re.M)
        token = re.search(r"^http://localhost:8888/lab\?token=(\w+)$", text, re.M).group(1)
        base = f"http://{tunnel.group(1)}:{tunnel.group(2)}/api/status"  # where the tunnel leads
        wait_for(lambda: http_status(base) is not None, 90, "JupyterLab did not answer")
        assert http_status(base) == 403
        assert http_status(f"{base}?token={token}") == 200
        assert token not in log.read_text()
    finally:
        local_cluster.command(["scancel", job_id], check=False)


def http_status(url):
    """HTTP status of ``url`` as a browser behind ``ssh -L 8888:node:port`` sees it (Host: localhost)."""
    try:
        request = urllib.request.Request(url, headers={"Host": "localhost:8888"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


def wait_for(condition, seconds, message):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"{message} within {seconds} s")


# --- Ray Train across the allocation: slurm/ray.sbatch (HVD_TRAINER picks it in submit.sh) ---
RAY_QUICK = ["--epochs", "1", "--max-steps", "5", "--batch-size", "32"]


def job_processes(cluster, job_id) -> list:
    """Live processes of this cluster's job ``job_id`` (Slurm puts both in every task's environment)."""
    found = []
    for proc in processes.with_env("SLURM_CONF", cluster.conf):
        try:
            if proc.environ().get("SLURM_JOB_ID") == str(job_id):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="module")
def ray_job(local_cluster, tmp_path_factory):
    job = submit(
        local_cluster,
        tmp_path_factory.mktemp("ray_two_nodes"),
        # a busy machine can need a second start of a Ray node (slurm/lib.sh: start_ray_step)
        ["--nodes=2", "--time=8"],
        RAY_QUICK,
        env={"HVD_TRAINER": "train_ray_tf"},
        timeout=460,
    )
    deadline = time.monotonic() + 15  # the steps' processes may take a moment to go
    while job_processes(local_cluster, job.job_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    return job, [p.pid for p in job_processes(local_cluster, job.job_id)]


@pytest.mark.timeout(500)
def test_ray_job_trains_two_workers_on_a_ray_cluster_across_both_nodes(ray_job):
    job, _ = ray_job
    assert job.state == "COMPLETED" and job.exit_code == "0:0", job.output[-3000:]
    assert job.info["JobName"] == "ray-train" and job.info["NodeList"] == "node[1-2]"
    # Slurm ran the head's step on node1 and the worker node's on node2; both joined one cluster
    assert "[ray] node1: starting a Ray head node" in job.output, job.output[-3000:]
    assert "[ray] node2: starting a Ray worker node" in job.output
    assert "[ray] 2 node(s) joined" in job.output
    assert re.search(
        r"^\[hvdcourse\] python -m hvdcourse.examples.train_ray_tf --address [\d.]+:\d+ --workers 2 ",
        job.output,
        re.M,
    )
    # a worker group of 2. Ray Train numbers nodes by IP address (node_rank), and the two simulated
    # nodes share this machine's: the placement on both nodes follows from each Ray node offering the
    # job's 1 CPU per node, and one worker needing 1 CPU
    assert {"world_rank=0", "world_rank=1"} <= set(re.findall(r"world_rank=\d", job.output))
    assert re.search(r"^\[train_ray_tf\] workers=2 test_accuracy=", job.output, re.M)


@pytest.mark.timeout(500)
def test_ray_job_stops_its_ray_cluster_and_leaves_no_process(ray_job):
    job, left = ray_job
    assert job.state == "COMPLETED", job.output[-3000:]
    assert "[ray] Ray cluster stopped" in job.output
    assert left == [], f"Ray job {job.job_id} left processes behind: {left}"
