"""hvdcourse-check: is this environment fit for the course? (lesson: Installing Horovod).

The build-check script (``check_hvd.py``) of the Supercomputers talk and the Large-scale Computation
guide, done properly: it reports what Horovod was built with, checks what the course needs, and exits
non-zero with a one-line fix when something is missing.

* ``hvdcourse-check``                 - build report + a 1-rank run (no launcher needed)
* ``hvdcourse-check --ranks 2``       - also launches itself on 2 ranks (Gloo and MPI) and checks
  that every rank answers and that an allreduce agrees, with TensorFlow and (when Horovod has its
  PyTorch extension) with PyTorch
* ``horovodrun -np 2 ... hvdcourse-check --rank-line`` (or srun) - one line per rank
* ``hvdcourse-check --gpu [--record FILE]`` - after ``make gpu``, the GPU route's check
  (:mod:`hvdcourse.course.check.gpu`): GPUs, driver, CUDA, NCCL, the build, images/s, NCCL's phases
* ``srun --nodes=N --ntasks-per-node=1 hvdcourse-check --allreduce-bandwidth`` - the interconnect:
  allreduce time, algorithm and bus bandwidth per message size, as NCCL's tests report them
  (:mod:`hvdcourse.course.lessons.bandwidth`), on the GPUs with NCCL or on the CPU with MPI/Gloo
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys

from hvdcourse.runtime.errors import CheckFailed, UsageError, run_cli
from hvdcourse.runtime.paths import ROOT, wheel_cache_entry

NEEDED_TF = "2.20"
NEEDED_HOROVOD = "0.28.1"
PYTHONS = ((3, 10), (3, 11), (3, 12), (3, 13))
FRAMEWORKS = {"tensorflow": "TensorFlow", "torch": "PyTorch"}  # --framework: the rank line's name


def tf_keras_version(tf) -> str:
    """Version of the Keras that ``tf.keras`` is: tf-keras (Keras 2) has no ``__version__`` there."""
    if getattr(tf.keras, "__name__", "").startswith("tf_keras"):
        import tf_keras

        return tf_keras.__version__
    return str(getattr(tf.keras, "__version__", "?"))


def build_report() -> tuple[list, list]:
    """Return (report lines, problems) describing the Horovod build. Does not call ``hvd.init()``."""
    lines, problems = [], []
    py = "%d.%d.%d" % sys.version_info[:3]
    lines.append(f"Python        {py}")
    if sys.version_info[:2] not in PYTHONS:
        problems.append(f"Python {py}: TensorFlow {NEEDED_TF} has wheels for Python 3.10-3.13 only")
    try:
        import tensorflow as tf
    except ImportError as err:
        problems.append(f"TensorFlow cannot be imported ({err}); run 'make env'")
        return lines, problems
    keras_version = tf_keras_version(tf)
    lines.append(f"TensorFlow    {tf.__version__} (tf.keras {keras_version})")
    if not tf.__version__.startswith(NEEDED_TF):
        problems.append(
            f"TensorFlow {tf.__version__}: the course and its Horovod patches are made for "
            f"{NEEDED_TF}; run 'make env'"
        )
    if not keras_version.startswith("2."):
        problems.append(
            f"tf.keras is Keras {keras_version}, but Horovod's Keras API needs Keras 2: set "
            "TF_USE_LEGACY_KERAS=1 before Python starts and install tf-keras (make env does both)"
        )
    try:
        import horovod
        import horovod.tensorflow as hvd
    except ImportError as err:
        problems.append(
            f"Horovod's TensorFlow extension cannot be loaded ({err}). Rebuild it: "
            "delete ~/.cache/hvdcourse/wheels and run 'make env'"
        )
        return lines, problems
    lines.append(f"Horovod       {horovod.__version__}")
    if horovod.__version__ != NEEDED_HOROVOD:
        problems.append(
            f"Horovod {horovod.__version__}: the course is tested with {NEEDED_HOROVOD}"
        )

    def mark(flag: bool) -> str:
        return "[X]" if flag else "[ ]"

    torch_built = _extension_built(horovod, "torch", "mpi_lib_v2")
    frameworks = {
        "TensorFlow": True,
        "PyTorch": torch_built,
        "MXNet": _extension_built(horovod, "mxnet", "mpi_lib"),
    }
    controllers = {"MPI": hvd.mpi_built(), "Gloo": hvd.gloo_built()}
    ops = {
        "NCCL": hvd.nccl_built(),
        "DDL": hvd.ddl_built(),
        "CCL": hvd.ccl_built(),
        "MPI": hvd.mpi_built(),
        "Gloo": hvd.gloo_built(),
    }
    gpu = {"CUDA": hvd.cuda_built(), "ROCm": hvd.rocm_built()}
    for title, table in (
        ("Frameworks", frameworks),
        ("Controllers", controllers),
        ("Tensor operations", ops),
        ("GPU support", gpu),
    ):
        lines.append(f"{title + ':':18}" + "  ".join(f"{mark(v)} {k}" for k, v in table.items()))
    for name in ("MPI", "Gloo"):
        if not controllers[name]:
            problems.append(
                f"Horovod was built without {name}; rebuild with HOROVOD_WITH_{name.upper()}=1 "
                "(delete ~/.cache/hvdcourse/wheels and run 'make env')"
            )
    torch_lines, torch_problems = torch_report(torch_built, horovod.__version__)
    lines[3:3] = torch_lines  # after Horovod's version, before the tables
    problems += torch_problems
    problems += hostname_problems()
    return lines, problems


def torch_ready() -> bool:
    """Whether PyTorch is installed and Horovod was built with its PyTorch extension."""
    import horovod

    return installed_version("torch") is not None and _extension_built(
        horovod, "torch", "mpi_lib_v2"
    )


def pinned_version(package: str, requirements: str | None = None) -> str | None:
    """The version ``requirements.txt`` pins for ``package`` (``name==X``), or None."""
    requirements = requirements or os.path.join(ROOT, "requirements.txt")
    if not os.path.isfile(requirements):
        return None
    with open(requirements) as fh:
        for line in fh:
            found = re.match(rf"^{re.escape(package)}==([^\s;#]+)", line.strip())
            if found:
                return found.group(1)
    return None


def installed_version(package: str) -> str | None:
    """The installed version of ``package`` (read from its metadata, without importing it), or None."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def torch_report(
    extension_built: bool, horovod_version: str, requirements: str | None = None
) -> tuple:
    """(lines, problems) about PyTorch: its version, whether Horovod's PyTorch extension is built and
    loads. Missing is a problem only where ``requirements`` (the course's requirements.txt) pins torch."""
    pinned = pinned_version("torch", requirements)
    version = installed_version("torch")
    if version is None:
        line = "PyTorch       not installed"
        if pinned:
            return [line], [
                f"PyTorch is not installed, but the course pins torch=={pinned}; run 'make env'"
            ]
        return [line], []
    lines = [
        f"PyTorch       {version} (Horovod's PyTorch extension: "
        f"{'built' if extension_built else 'NOT built'})"
    ]
    problems = []
    if pinned and version.split("+")[0] != pinned:  # 2.13.0+cpu is torch 2.13.0
        problems.append(f"PyTorch {version}, but the course pins torch=={pinned}; run 'make env'")
    if not extension_built:
        if pinned:
            problems.append(
                f"Horovod was built without its PyTorch extension (torch=={pinned} is pinned): delete "
                f"{wheel_cache_entry(horovod_version)} and run 'make env'"
            )
        return lines, problems
    try:
        import horovod.torch  # noqa: F401  (loads the extension against the installed torch)
    except ImportError as err:  # e.g. torch changed after Horovod was built
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        problems.append(
            f"Horovod's PyTorch extension does not load ({first[:160]}): delete "
            f"{wheel_cache_entry(horovod_version)} and run 'make env'"
        )
    return lines, problems


def hostname_problems(host: str | None = None) -> list:
    """Gloo's rendezvous resolves this machine's name, and Horovod 0.28.1's Gloo crashes (SIGSEGV in
    ``gloo::transport::tcp::CreateDevice``) instead of saying so when it cannot: check it first."""
    host = host or socket.gethostname()
    try:
        socket.getaddrinfo(host, None)
    except OSError:
        return [
            f"this machine's name {host!r} does not resolve, and horovodrun --gloo then crashes with "
            f"SIGSEGV. Add it to /etc/hosts: echo '127.0.1.1 {host}' | sudo tee -a /etc/hosts"
        ]
    return []


def _extension_built(horovod, framework: str, library: str) -> bool:
    """Whether Horovod's compiled library for ``framework`` exists (without importing the framework)."""
    import glob
    import os

    folder = os.path.join(os.path.dirname(horovod.__file__), framework)
    return bool(glob.glob(os.path.join(folder, library + "*.so")))


def rank_line(framework: str = "tensorflow") -> tuple[str, float]:
    """Initialise Horovod with ``framework``'s API (``tensorflow`` or ``torch``) and return this rank's
    line and the result of a test allreduce (each rank gives rank + 1: the sum is known)."""
    if framework == "torch":
        import horovod.torch as hvd
        import torch

        hvd.init()
        total = float(hvd.allreduce(torch.tensor(float(hvd.rank() + 1)), op=hvd.Sum))
    else:
        import horovod.tensorflow as hvd
        import tensorflow as tf

        hvd.init()
        total = float(hvd.allreduce(tf.constant(float(hvd.rank() + 1)), op=hvd.Sum).numpy())
    controller = "MPI" if hvd.mpi_enabled() else "Gloo" if hvd.gloo_enabled() else "?"
    threads = ""
    if hvd.mpi_enabled():
        threads = f" mpi_threads={'yes' if hvd.mpi_threads_supported() else 'no'}"
    line = (
        f"rank={hvd.rank()} local_rank={hvd.local_rank()} size={hvd.size()} "
        f"local_size={hvd.local_size()} host={socket.gethostname()} controller={controller}{threads} "
        f"framework={FRAMEWORKS[framework]} allreduce_sum={total:g}"
    )
    return line, total


def check_ranks(
    np: int, timeout: float, launchers=("gloo", "mpi"), frameworks=("tensorflow",)
) -> list:
    """Launch this module on ``np`` ranks under each launcher, once per framework; return the problems."""
    from hvdcourse.runtime.launch import run_ranks

    problems = []
    expected_sum = np * (np + 1) / 2
    for launcher, framework in [(lc, fw) for lc in launchers for fw in frameworks]:
        run = run_ranks(
            [
                sys.executable,
                "-m",
                "hvdcourse.course.check.envcheck",
                "--rank-line",
                "--framework",
                framework,
            ],
            np,
            launcher,
            timeout,
        )
        # each rank reports its line and its sum
        answers = [found[-1] for found in run.results if found]
        name = FRAMEWORKS[framework]
        print(f"--- {np} ranks, horovodrun --{launcher}, {name} ({run.seconds:.1f} s)")
        for answer in answers:
            print("  " + answer["line"])
        if not run.ok or len(answers) != np:
            silent = [rank for rank, found in enumerate(run.results) if not found]
            tail = "\n    ".join(run.output.strip().splitlines()[-8:])
            problems.append(
                f"{np}-rank {name} run under {launcher} failed (exit {run.returncode}, "
                f"{len(answers)}/{np} ranks answered; silent: rank(s) {silent}):\n    {tail}"
            )
        elif not all(answer["allreduce_sum"] == expected_sum for answer in answers):
            problems.append(
                f"{launcher}, {name}: allreduce gave a wrong sum (expected {expected_sum:g})"
            )
    return problems


def check(argv=None) -> int:
    """The check; raises :class:`~hvdcourse.runtime.errors.CheckFailed` when the environment is not ready."""
    parser = argparse.ArgumentParser(prog="hvdcourse-check", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ranks", type=int, default=1, help="also launch on this many ranks (Gloo and MPI)"
    )
    parser.add_argument("--timeout", type=float, default=120, help="limit for each launch, seconds")
    parser.add_argument(
        "--launchers",
        default="gloo,mpi",
        help="controllers to try with --ranks, comma-separated (default gloo,mpi)",
    )
    parser.add_argument(
        "--rank-line", action="store_true", help="only print this rank's line (under a launcher)"
    )
    parser.add_argument(
        "--framework",
        choices=sorted(FRAMEWORKS),
        default="tensorflow",
        help="with --rank-line: the Horovod API whose allreduce the rank runs",
    )
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="the GPU route's check (after 'make gpu'): GPUs, build, images/s, NCCL phases",
    )
    parser.add_argument(
        "--record", metavar="FILE", help="with --gpu: write the figures as a GPU record (JSON)"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="with --gpu: timed steps per batch size (default 50)",
    )
    parser.add_argument(
        "--batch-sizes", default=None, help="with --gpu: the two batch sizes (default 128,1024)"
    )
    parser.add_argument(
        "--allreduce-bandwidth",
        action="store_true",
        help="under a launcher (srun, horovodrun, mpirun): allreduce time and bandwidth per message "
        "size, rank 0 prints them",
    )
    parser.add_argument(
        "--sizes",
        default=None,
        help="with --allreduce-bandwidth: message sizes, comma-separated (default 4K,16K,...,64M)",
    )
    parser.add_argument(
        "--iters",
        type=int,
        default=None,
        help="with --allreduce-bandwidth: timed allreduces per size (default 20)",
    )
    args = parser.parse_args(argv)
    if args.allreduce_bandwidth:
        from hvdcourse.course.lessons import bandwidth

        iters = bandwidth.DEFAULT_ITERS if args.iters is None else args.iters
        if iters < 1:
            raise UsageError(f"--iters {iters}: give at least 1")
        sizes = bandwidth.parse_sizes(args.sizes) if args.sizes else bandwidth.DEFAULT_SIZES
        if not sizes:
            raise UsageError("--sizes: give at least one size, e.g. 4K,1M")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        bandwidth.run(sizes, iters, min(bandwidth.DEFAULT_WARMUP, iters))
        return 0
    if args.sizes or args.iters is not None:
        raise UsageError("--sizes and --iters go with --allreduce-bandwidth")
    if args.gpu:
        from hvdcourse.course.check import gpu

        steps = gpu.DEFAULT_STEPS if args.steps is None else args.steps
        if steps < 1:
            raise UsageError(f"--steps {steps}: give at least 1")
        sizes = gpu.DEFAULT_BATCH_SIZES
        if args.batch_sizes:
            sizes = gpu.parse_batch_sizes(args.batch_sizes)
        gpu.check(steps, sizes, args.timeout, args.record)
        return 0
    if args.record or args.steps is not None or args.batch_sizes:
        raise UsageError("--record, --steps and --batch-sizes go with --gpu")
    unknown = sorted(set(args.launchers.split(",")) - {"gloo", "mpi"})
    if unknown:
        raise UsageError(
            f"--launchers: unknown controller(s) {', '.join(unknown)}; use gloo, mpi or gloo,mpi"
        )
    # keep TensorFlow's start-up chatter (and TF 2.20's "failed call to cuInit" on machines without an
    # NVIDIA driver) out of the report
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    if args.rank_line:
        from hvdcourse.runtime.results import report

        line, total = rank_line(args.framework)
        print(line, flush=True)
        report({"line": line, "allreduce_sum": total})
        return 0

    lines, problems = build_report()
    print("\n".join(lines))
    if not problems:
        try:
            from hvdcourse.runtime.mpienv import require_mpi

            require_mpi()
            print(rank_line()[0])
        except Exception as err:
            problems.append(str(err))
    if not problems and args.ranks > 1:
        frameworks = ("tensorflow", "torch") if torch_ready() else ("tensorflow",)
        problems += check_ranks(args.ranks, args.timeout, args.launchers.split(","), frameworks)
    if problems:
        print("\nNOT READY:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        raise CheckFailed(
            f"this environment is not ready for the course: fix the {len(problems)} problem(s) "
            "listed above and run the check again"
        )
    print("\nOK: this environment is ready for the course.")
    return 0


def main(argv=None) -> int:
    """The ``hvdcourse-check`` command: :func:`check` with the course's one-line errors and exit codes."""
    args = sys.argv[1:] if argv is None else argv
    rank = "--rank-line" in args or "--allreduce-bandwidth" in args  # one rank of several
    return run_cli(check, argv, stop_on_sigterm=not rank)


if __name__ == "__main__":
    sys.exit(main())
