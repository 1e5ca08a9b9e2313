"""The sample class: student notebooks built from the learner notebooks, for the grader's tests and demo.

``python tests/grading/grading_samples.py`` rewrites ``tests/grading/submissions/``; a test checks that the
committed files are what this builds, so the samples follow the exercises when those change.

Each student edits the learner notebook of an exercise the way a student would: the answer cell
(the one with the placeholder) gets their code; some also add cells. alice answers well; bob makes
the classic mistakes; carol, dave and eve submit the broken notebooks a grader must survive.
"""

from __future__ import annotations

import os
import shutil
import sys

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "grading", "submissions")
SOLUTION = object()  # "this student's answer is the solution cell"
# in the command line of ranks that dave's notebook leaves running
MARKER = "hvdcourse-sample-sleeper"

BOB_EX01 = """import numpy as np

from hvdcourse.course.exercises import checks


def after_collectives(values):
    size = len(values)
    arrays = np.asarray(values, dtype=float)
    return {
        "allreduce": [arrays.sum(axis=0).tolist()] * size,  # like MPI: a sum
        "allreduce_sum": [arrays.sum(axis=0).tolist()] * size,
        "broadcast_from_1": [arrays[1].tolist()] * size,
        "allgather": [arrays.tolist()] * size,  # a list of the ranks' vectors
    }
"""

BOB_EX02 = """import numpy as np

from hvdcourse.course.exercises import checks


def global_mean(hvd, local_values):
    import tensorflow as tf

    local_mean = tf.constant(float(np.mean(local_values)), dtype=tf.float64)
    return float(hvd.allreduce(local_mean).numpy())  # the average of the ranks' means
"""

BOB_EX03 = """import numpy as np

from hvdcourse.course.exercises import checks


def shard_indices(num_examples, rank, size):
    per_rank = num_examples // size  # contiguous blocks; the remainder is forgotten
    return list(range(rank * per_rank, (rank + 1) * per_rank))
"""

BOB_EX04 = """import numpy as np

from hvdcourse.course.exercises import checks


def ring_allreduce(comm, x):
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    total = np.array(x, dtype=np.float64)
    passing = total.copy()
    for _ in range(size - 1):  # pass whole vectors around the ring
        incoming = np.empty_like(passing)
        comm.Sendrecv(passing, dest=right, recvbuf=incoming, source=left)
        total += incoming
        passing = incoming
    return total
"""

BOB_EX06 = """def optimizer_and_warmup(hvd, base_lr, warmup_epochs, steps_per_epoch):
    scaled_lr = base_lr * hvd.size()
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=scaled_lr))
    # as in the source guide
    warmup = hvd.callbacks.LearningRateWarmupCallback(lr=scaled_lr, warmup_epochs=warmup_epochs, verbose=1)
    return optimizer, [warmup]
"""

BOB_EX07 = """import os

import tensorflow as tf

from hvdcourse.course.exercises import checks


def distributed_callbacks(hvd, checkpoint_dir):
    os.makedirs(checkpoint_dir, exist_ok=True)
    return [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, "weights-{epoch}.h5"),
                                           save_weights_only=True),
    ]
"""

BOB_EX10 = '''from hvdcourse.course.exercises import checks


def job_script(nodes, tasks_per_node, minutes, epochs):
    return f"""#!/bin/bash
#SBATCH --nodes={nodes}
module load openmpi
#SBATCH --ntasks-per-node={tasks_per_node}
#SBATCH --time={minutes}
mpirun -np {nodes * tasks_per_node} python -m hvdcourse.examples.train_hvd --epochs {epochs}
"""
'''

BOB_EX15 = """def train_hvd(epochs=2, batch_size=16, lr=1e-3, max_steps=3, checkpoint_dir="checkpoints",
              resume_from="start.pt"):
    import horovod.torch as hvd

    hvd.init()
    torch_training.set_threads(0, hvd.local_size())
    mnist = data.load_mnist(quiet=True)
    train_set = TensorDataset(*torch_model.to_tensors(mnist.x_train, mnist.y_train))
    sampler = DistributedSampler(train_set, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=42)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True)
    steps = training.steps_per_epoch(len(train_set), batch_size, hvd.size(), max_steps)
    model = torch_model.build_model()
    lr = lr * hvd.size()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    loss_fn = torch_model.loss_fn()
    if hvd.rank() == 0 and os.path.exists(resume_from):
        restore(resume_from, model, optimizer, lr)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # the weights, but not Adam's state
    for epoch in range(epochs):  # the sampler never hears of the epoch
        epoch_loss = 0.0
        for x, y in itertools.islice(loader, steps):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
        train_loss = hvd.allreduce(torch.tensor(epoch_loss / steps)).item()
        if hvd.rank() == 0:
            save(checkpoint_dir, epoch, model, optimizer)
    return model, loader, {"train_loss": train_loss}
"""

BOB_EX11 = """bugs = {}  # kind -> line number
bugs = {"undefined-name": 20, "warmup-argument": 28, "unscaled-lr": 22, "every-rank-checkpoints": 12}
"""

BOB_EX12 = """def shard_columns(weight, bias, rank, size):
    n = weight.shape[1] // size
    return weight[:, rank * n:(rank + 1) * n], bias[rank * n:(rank + 1) * n]


def column_parallel_linear(comm, x, weight_shard, bias_shard):
    return x @ weight_shard + bias_shard  # this rank's columns only: nothing gathered
"""

BOB_EX13 = """def predicted_bubble(stages, micro_batches):
    return (stages - 1) / micro_batches  # idle time over the work, not over the step


def measured_idle_share(ops, step_time):
    busy = sum(end - start for _, _, start, end in ops)
    return 1 - busy / step_time
"""

BOB_EX14 = """def accumulating_optimizer(hvd, lr, k):
    import tensorflow as tf

    # accumulates, but sums the k batches' gradients (the default)
    return hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=lr), backward_passes_per_step=k)
"""

SYNTAX_ERROR = """import numpy as np

from hvdcourse.course.exercises import checks


def after_collectives(values)
    return {}
"""

CRASH = "import os\n\nos._exit(1)  # the kernel dies here\n"
SYS_EXIT = "import sys\n\nsys.exit('I give up')\n"
ENDLESS = f'''import subprocess
import sys

from hvdcourse.runtime.mpienv import launch_env

# two MPI ranks that never finish, then an endless loop: the grader must stop all of it
subprocess.Popen(["mpirun", "-np", "2", sys.executable, "-c", "import time; time.sleep(3600)", "{MARKER}"],
                 env=launch_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
while True:
    pass
'''
HUGE_OUTPUT = 'for _ in range(10_000):\n    print("all work and no play " * 5_000)\n'
RICH_OUTPUT = (
    "from IPython.display import display\n\nfor _ in range(100_000):  # rich output, not print()\n"
    '    display({"text/plain": "x" * 10_000}, raw=True)\n'
)
READ_SOLUTIONS = """import os

import hvdcourse

root = os.path.dirname(os.path.dirname(hvdcourse.__file__))
print(open(os.path.join(root, "solutions", "ex01_collectives.ipynb")).read()[:100])
"""
WRITE_OUTSIDE = """with open("/tmp/hvdcourse-sample-eve-was-here.txt", "w") as fh:
    fh.write("outside the sandbox")
"""
SHELL_SOLUTIONS = """import os
import subprocess

import hvdcourse

root = os.path.dirname(os.path.dirname(hvdcourse.__file__))
subprocess.run(["cat", os.path.join(root, "solutions", "ex10_slurm.ipynb")])
"""

# student -> {exercise notebook: (answer for the placeholder cell, [cells inserted before the answer])}
CLASS = {
    "alice": {
        name: (SOLUTION, [])
        for name in (
            "ex01_collectives",
            "ex03_sharding",
            "ex04_ring_allreduce",
            "ex08_timeline",
            "ex09_scaling",
            "ex10_slurm",
            "ex11_find_the_bug",
            "ex12_column_parallel",
            "ex13_pipeline_bubble",
            "ex14_accumulation",
        )
    },
    "bob": {
        "ex01_collectives": (BOB_EX01, []),
        "ex02_global_mean": (BOB_EX02, []),
        "ex03_sharding": (BOB_EX03, []),
        "ex04_ring_allreduce": (BOB_EX04, []),
        "ex06_lr_warmup": (BOB_EX06, []),
        "ex07_rank0_checkpoints": (BOB_EX07, []),
        "ex10_slurm": (BOB_EX10, []),
        "ex11_find_the_bug": (BOB_EX11, []),
        "ex12_column_parallel": (BOB_EX12, []),
        "ex13_pipeline_bubble": (BOB_EX13, []),
        "ex14_accumulation": (BOB_EX14, []),
        "ex15_torch_conversion": (BOB_EX15, []),
    },
    "carol": {
        "ex01_collectives": (SYNTAX_ERROR, []),
        "ex03_sharding": (SOLUTION, [SYS_EXIT]),
        "ex04_ring_allreduce": (SOLUTION, [CRASH]),
    },
    "dave": {
        "ex03_sharding": (SOLUTION, [RICH_OUTPUT]),
        "ex10_slurm": (SOLUTION, [ENDLESS]),
        "ex11_find_the_bug": (SOLUTION, [HUGE_OUTPUT]),
    },
    "eve": {
        "ex01_collectives": (SOLUTION, [READ_SOLUTIONS]),
        "ex03_sharding": (SOLUTION, [WRITE_OUTSIDE]),
        "ex10_slurm": (SOLUTION, [SHELL_SOLUTIONS]),
    },
}
MALFORMED = {"dave": "ex01_collectives"}  # a notebook cut in the middle of its JSON
# alice's solutions whose checks start 2 ranks: her notebooks hold their code cells unchanged, so the
# grader's run of them is the suite's one run of these solutions and their checks (test_grader.py
# asserts no cell error and full marks); tests/exercises/test_exercise_notebooks.py skips them
RANK_CHECKED_SOLUTIONS = (
    "ex03_sharding",
    "ex04_ring_allreduce",
    "ex12_column_parallel",
    "ex13_pipeline_bubble",
    "ex14_accumulation",
)
# every solution notebook that the grader's tests run and check in full: alice's above, and exercise
# 5's, graded as it is by test_grader.py's MNIST test (a 2-rank training)
GRADED_SOLUTIONS = (*RANK_CHECKED_SOLUTIONS, "ex05_conversion")


def answer_cell(nb) -> int:
    """Index of the learner notebook's first cell with a placeholder."""
    return next(
        i for i, c in enumerate(nb.cells) if 'raise NotImplementedError("Exercise' in c.source
    )


def build_notebook(name: str, answer, inserted: list):
    learner = nbformat.read(os.path.join(ROOT, "exercises", f"{name}.ipynb"), as_version=4)
    solution = nbformat.read(os.path.join(ROOT, "solutions", f"{name}.ipynb"), as_version=4)
    index = answer_cell(learner)
    learner.cells[index].source = (
        solution.cells[index].source if answer is SOLUTION else answer.rstrip("\n")
    )
    for offset, source in enumerate(inserted):
        cell = nbformat.v4.new_code_cell(source.rstrip("\n"))
        cell.id = f"{learner.cells[index].id}-extra{offset}"
        learner.cells.insert(index + offset, cell)
    return learner


def build(out: str = OUT) -> list:
    """Write the sample class into ``out`` (replacing it); return the paths written."""
    if os.path.isdir(out):
        shutil.rmtree(out)
    written = []
    for student, notebooks in CLASS.items():
        os.makedirs(os.path.join(out, student))
        for name, (answer, inserted) in notebooks.items():
            path = os.path.join(out, student, f"{name}.ipynb")
            with open(path, "w") as fh:
                fh.write(nbformat.writes(build_notebook(name, answer, inserted)) + "\n")
            written.append(path)
    for student, name in MALFORMED.items():
        path = os.path.join(out, student, f"{name}.ipynb")
        text = nbformat.writes(
            nbformat.read(os.path.join(ROOT, "exercises", f"{name}.ipynb"), as_version=4)
        )
        with open(path, "w") as fh:
            fh.write(text[: len(text) // 2])  # the upload was cut
        written.append(path)
    return sorted(written)


if __name__ == "__main__":
    print("\n".join(build()))
    sys.exit(0)
