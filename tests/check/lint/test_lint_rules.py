"""Each rule of hvdcourse-lint on a script that makes its mistake and on one that does not, written
with the import forms and aliases a learner uses (``import horovod.torch as hvd``, ``from
horovod.tensorflow.keras import DistributedOptimizer``, ``Dist = hvd.DistributedOptimizer``).

The scripts are source text only: nothing is imported or run.
"""

import textwrap

import pytest

from hvdcourse.course.check.lint.lint import lint_source
from hvdcourse.course.check.lint.rules import RULES

# a correct Keras script, and a correct PyTorch one: each case below changes a few lines of them
KERAS = """\
import tensorflow as tf
import horovod.tensorflow.keras as hvd

hvd.init()
gpus = tf.config.list_physical_devices("GPU")
if gpus:
    tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")
(x, y), (x_val, y_val) = tf.keras.datasets.mnist.load_data()
x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
lr = 1e-3 * hvd.size() ** 0.5
model = tf.keras.Sequential([tf.keras.layers.Flatten(), tf.keras.layers.Dense(10)])
opt = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=lr))
model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=3),
]
if hvd.rank() == 0:
    callbacks.append(tf.keras.callbacks.ModelCheckpoint("ckpt-{epoch}.h5"))
model.fit(x, y, batch_size=64, epochs=3, callbacks=callbacks,
          validation_data=(x_val, y_val), verbose=2 if hvd.rank() == 0 else 0)
"""

TORCH = """\
import torch
import horovod.torch as hvd
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

hvd.init()
torch.set_num_threads(1)
dataset = TensorDataset(*torch.load("data.pt"))
sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())
loader = DataLoader(dataset, batch_size=16, sampler=sampler)
model = torch.nn.Linear(4, 2)
lr = 0.01 * hvd.size()
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1 / hvd.size(), total_iters=50)
for epoch in range(3):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        warmup.step()
    if hvd.rank() == 0:
        torch.save(model.state_dict(), f"epoch-{epoch}.pt")
"""

DDP = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
local_rank = int(os.environ["LOCAL_RANK"])
dataset = TensorDataset(torch.randn(256, 4), torch.randn(256, 2))
sampler = DistributedSampler(dataset)
loader = DataLoader(dataset, batch_size=16, sampler=sampler)
model = DDP(torch.nn.Linear(4, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3 * dist.get_world_size() ** 0.5)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, step / 100))
for epoch in range(3):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        scheduler.step()
dist.destroy_process_group()
"""


def change(base: str, *edits) -> str:
    """``base`` with each ``(old, new)`` replaced once (old must be there)."""
    text = base
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def findings(text: str) -> list:
    return [(f.rule, f.line) for f in lint_source(textwrap.dedent(text), "t.py") if not f.note]


def line_of(text: str, fragment: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if fragment in line)


@pytest.mark.parametrize("base", [KERAS, TORCH, DDP], ids=["keras", "torch", "ddp"])
def test_the_correct_scripts_give_no_finding_and_no_note(base):
    assert [f.format() for f in lint_source(base, "t.py")] == []


# (rule, failing script, the fragment of the line it names, passing script)
CASES = {
    "undefined-name": (
        change(KERAS, ("x, y = x[", "x, y = train[")),
        "x, y = train[",
        change(KERAS, ("hvd.init()\n", "hvd.init()\ntrain = None\n")),
    ),
    "missing-init: a call before hvd.init()": (
        change(KERAS, ("hvd.init()\n", "print(hvd.size())\nhvd.init()\n")),
        "print(hvd.size())",
        KERAS,
    ),
    "missing-init: never started (from-import)": (
        change(
            TORCH,
            (
                "import horovod.torch as hvd\n",
                "import horovod.torch as hvd\nfrom horovod.torch import init as start\n",
            ),
            ("hvd.init()\n", ""),
        ),
        "sampler = DistributedSampler",
        change(
            TORCH,
            (
                "import horovod.torch as hvd\n",
                "import horovod.torch as hvd\nfrom horovod.torch import init as start\n",
            ),
            ("hvd.init()\n", "start()\n"),
        ),
    ),
    "missing-init: DDP without a process group": (
        change(DDP, ('dist.init_process_group("gloo")\n', "")),
        "model = DDP(",
        DDP,
    ),
    "unwrapped-optimizer: Keras": (
        change(
            KERAS,
            (
                "hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=lr))",
                "tf.keras.optimizers.Adam(learning_rate=lr)",
            ),
        ),
        "model.compile(",
        change(
            KERAS,
            (
                "import horovod.tensorflow.keras as hvd\n",
                "import horovod.tensorflow.keras as hvd\nfrom horovod.tensorflow.keras import DistributedOptimizer\n",
            ),
            ("hvd.DistributedOptimizer(tf.keras", "DistributedOptimizer(tf.keras"),
        ),
    ),
    "unwrapped-optimizer: wrapped after compile": (
        change(
            KERAS,
            (
                'opt = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(learning_rate=lr))\nmodel.compile(optimizer=opt, loss="sparse_categorical_crossentropy")',
                'opt = tf.keras.optimizers.Adam(learning_rate=lr)\nmodel.compile(optimizer=opt, loss="sparse_categorical_crossentropy")\nopt = hvd.DistributedOptimizer(opt)',
            ),
        ),
        "opt = hvd.DistributedOptimizer(opt)",
        KERAS,
    ),
    "unwrapped-optimizer: PyTorch, an alias of the wrapper": (
        change(
            TORCH,
            (
                "optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())\n",
                "",
            ),
        ),
        "optimizer = torch.optim.SGD(",
        change(
            TORCH,
            (
                "optimizer = hvd.DistributedOptimizer(optimizer,",
                "Dist = hvd.DistributedOptimizer\noptimizer = Dist(optimizer,",
            ),
        ),
    ),
    "unwrapped-optimizer: DDP without the wrapper": (
        change(DDP, ("model = DDP(torch.nn.Linear(4, 2))", "model = torch.nn.Linear(4, 2)")),
        "optimizer = torch.optim.Adam(",
        DDP,
    ),
    "missing-broadcast: Keras": (
        change(KERAS, ("    hvd.callbacks.BroadcastGlobalVariablesCallback(0),\n", "")),
        "callbacks = [",
        change(
            KERAS,
            (
                "import horovod.tensorflow.keras as hvd\n",
                "import horovod.tensorflow.keras as hvd\nfrom horovod.tensorflow.keras.callbacks import BroadcastGlobalVariablesCallback as Bcast\n",
            ),
            ("hvd.callbacks.BroadcastGlobalVariablesCallback(0)", "Bcast(0)"),
        ),
    ),
    "missing-broadcast: PyTorch": (
        change(TORCH, ("hvd.broadcast_parameters(model.state_dict(), root_rank=0)\n", "")),
        "optimizer = hvd.DistributedOptimizer(",
        change(
            TORCH,
            (
                "import horovod.torch as hvd\n",
                "import horovod.torch as hvd\nfrom horovod.torch import broadcast_parameters\n",
            ),
            ("hvd.broadcast_parameters(", "broadcast_parameters("),
        ),
    ),
    "early-broadcast": (
        """\
        import tensorflow as tf
        import horovod.tensorflow as hvd
        hvd.init()
        model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
        opt = tf.keras.optimizers.Adam(1e-3 * hvd.size() ** 0.5)
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)
        for x, y, warmup_lr in batches():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            tape = hvd.DistributedGradientTape(tape)
            opt.apply_gradients(zip(tape.gradient(loss, model.variables), model.variables))
        """,
        "hvd.broadcast_variables(opt.variables",
        """\
        import tensorflow as tf
        import horovod.tensorflow as hvd
        hvd.init()
        model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
        opt = tf.keras.optimizers.Adam(1e-3 * hvd.size() ** 0.5)
        opt.build(model.trainable_variables)
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables, root_rank=0)
        for x, y, warmup_lr in batches():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            tape = hvd.DistributedGradientTape(tape)
            opt.apply_gradients(zip(tape.gradient(loss, model.variables), model.variables))
        """,
    ),
    "missing-broadcast: the optimizer's state restored on rank 0 only": (
        change(
            TORCH,
            ("hvd.broadcast_optimizer_state(optimizer, root_rank=0)\n", ""),
            (
                "hvd.broadcast_parameters(",
                "if hvd.rank() == 0:\n"
                '    optimizer.load_state_dict(torch.load("ckpt.pt")["optimizer"])\n'
                "hvd.broadcast_parameters(",
            ),
        ),
        "optimizer = hvd.DistributedOptimizer(",
        change(
            TORCH,
            (
                "hvd.broadcast_parameters(",
                "if hvd.rank() == 0:\n"
                '    optimizer.load_state_dict(torch.load("ckpt.pt")["optimizer"])\n'
                "hvd.broadcast_parameters(",
            ),
        ),
    ),
    "unscaled-lr": (
        change(KERAS, ("lr = 1e-3 * hvd.size() ** 0.5", "lr = 1e-3")),
        "opt = hvd.DistributedOptimizer(",
        change(
            KERAS,
            ("model.fit(x, y, batch_size=64,", "model.fit(x, y, batch_size=256 // hvd.size(),"),
            ("lr = 1e-3 * hvd.size() ** 0.5", "lr = 1e-3"),
        ),
    ),
    "lr-rule: Adadelta scaled linearly (the source documents)": (
        change(
            KERAS,
            (
                "tf.keras.optimizers.Adam(learning_rate=lr)",
                "tf.keras.optimizers.Adadelta(1.0 * hvd.size())",
            ),
        ),
        "opt = hvd.DistributedOptimizer(",
        change(
            KERAS,
            (
                "tf.keras.optimizers.Adam(learning_rate=lr)",
                "tf.keras.optimizers.Adadelta(1.0 * hvd.size() ** 0.5)",
            ),
        ),
    ),
    "lr-rule: SGD by the square root": (
        change(
            TORCH,
            ("lr = 0.01 * hvd.size()", "lr = 0.01 * math.sqrt(hvd.size())"),
            ("import torch\n", "import math\nimport torch\n"),
        ),
        "optimizer = torch.optim.SGD(",
        TORCH,
    ),
    "lr-rule: the batch divided and the rate scaled": (
        change(TORCH, ("batch_size=16,", "batch_size=64 // hvd.size(),")),
        "optimizer = torch.optim.SGD(",
        change(
            TORCH,
            ("batch_size=16,", "batch_size=64 // hvd.size(),"),
            ("lr = 0.01 * hvd.size()", "lr = 0.01"),
        ),
    ),
    "missing-warmup": (
        change(
            KERAS,
            ("    hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=3),\n", ""),
        ),
        "opt = hvd.DistributedOptimizer(",
        KERAS,
    ),
    "momentum-correction": (
        change(
            KERAS,
            (
                "tf.keras.optimizers.Adam(learning_rate=lr)",
                "tf.keras.optimizers.SGD(learning_rate=0.01 * hvd.size(), momentum=0.9)",
            ),
        ),
        "hvd.callbacks.LearningRateWarmupCallback(",
        change(
            KERAS,
            (
                "tf.keras.optimizers.Adam(learning_rate=lr)",
                "tf.keras.optimizers.SGD(learning_rate=0.01 * hvd.size(), momentum=0.9)",
            ),
            ("warmup_epochs=3)", "warmup_epochs=3, momentum_correction=False)"),
        ),
    ),
    "unsharded-data: Keras arrays": (
        change(KERAS, ("x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]\n", "")),
        "model.fit(",
        change(
            KERAS,
            (
                "x, y = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]\n",
                "data = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).batch(64)\n",
            ),
            ("model.fit(x, y, batch_size=64,", "model.fit(data,"),
        ),
    ),
    "unsharded-data: a DataLoader without sampler": (
        change(
            TORCH,
            (
                "loader = DataLoader(dataset, batch_size=16, sampler=sampler)",
                "loader = DataLoader(dataset, batch_size=16, shuffle=True)",
            ),
        ),
        "loader = DataLoader(",
        TORCH,
    ),
    "unsharded-data: a Horovod DistributedSampler without num_replicas and rank": (
        change(
            TORCH,
            (
                "DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())",
                "DistributedSampler(dataset)",
            ),
        ),
        "sampler = DistributedSampler(",
        TORCH,
    ),
    "sampler-epoch": (
        change(TORCH, ("    sampler.set_epoch(epoch)\n", "")),
        "sampler = DistributedSampler(",
        change(
            TORCH,
            ("    sampler.set_epoch(epoch)\n", ""),
            ("rank=hvd.rank())", "rank=hvd.rank(), shuffle=False)"),
        ),
    ),
    "unscaled-steps": (
        change(
            KERAS,
            ("epochs=3,", "epochs=3, steps_per_epoch=steps,"),
            ("lr = 1e-3", "steps = len(x_val) // 64\nlr = 1e-3"),
        ),
        "steps = len(x_val) // 64",
        change(
            KERAS,
            ("epochs=3,", "epochs=3, steps_per_epoch=steps,"),
            ("lr = 1e-3", "steps = len(x_val) // (64 * hvd.size())\nlr = 1e-3"),
        ),
    ),
    "every-rank-checkpoints: a Keras callback": (
        change(KERAS, ("if hvd.rank() == 0:\n    callbacks.append(", "callbacks.append(")),
        "callbacks.append(tf.keras.callbacks.ModelCheckpoint(",
        KERAS,
    ),
    "every-rank-checkpoints: torch.save through an alias": (
        change(
            TORCH,
            (
                "    if hvd.rank() == 0:\n        torch.save(model.state_dict()",
                "    save(model.state_dict()",
            ),
            ("import torch\n", "import torch\nfrom torch import save\n"),
        ),
        "    save(model.state_dict()",
        change(
            TORCH,
            (
                "    if hvd.rank() == 0:\n        torch.save(model.state_dict()",
                "    if rank != 0:\n        continue\n    save(model.state_dict()",
            ),
            ("import torch\n", "import torch\nfrom torch import save\n"),
            ("hvd.init()\n", "hvd.init()\nrank = hvd.rank()\n"),
        ),
    ),
    "every-rank-logs: TensorBoard on every rank": (
        change(
            KERAS,
            (
                "    hvd.callbacks.MetricAverageCallback(),\n",
                "    hvd.callbacks.MetricAverageCallback(),\n    tf.keras.callbacks.TensorBoard('logs'),\n",
            ),
        ),
        "tf.keras.callbacks.TensorBoard(",
        change(
            KERAS,
            (
                '    callbacks.append(tf.keras.callbacks.ModelCheckpoint("ckpt-{epoch}.h5"))',
                "    callbacks.append(tf.keras.callbacks.ModelCheckpoint(\"ckpt-{epoch}.h5\"))\n    callbacks.append(tf.keras.callbacks.TensorBoard('logs'))",
            ),
        ),
    ),
    "every-rank-logs: fit prints on every rank": (
        change(KERAS, (", verbose=2 if hvd.rank() == 0 else 0)", ")")),
        "model.fit(",
        KERAS,
    ),
    "every-rank-logs: a metric printed by every rank": (
        change(
            TORCH,
            (
                "    if hvd.rank() == 0:\n",
                '    print(f"epoch {epoch}: loss={loss.item():.3f}")\n    if hvd.rank() == 0:\n',
            ),
        ),
        'print(f"epoch {epoch}: loss=',
        change(
            TORCH,
            (
                "    if hvd.rank() == 0:\n",
                '    if hvd.rank() == 0:\n        print(f"epoch {epoch}: loss={loss.item():.3f}")\n',
            ),
        ),
    ),
    "every-rank-logs: a loss on batches moved to the local rank's GPU, printed by every rank": (
        change(
            TORCH,
            ("hvd.init()\n", "hvd.init()\ndevice = torch.device('cuda', hvd.local_rank())\n"),
            (
                "        optimizer.zero_grad()\n",
                "        x, y = x.to(device), y.to(device)\n        optimizer.zero_grad()\n",
            ),
            (
                "    if hvd.rank() == 0:\n",
                '    print(f"epoch {epoch}: loss={loss.item():.3f}")\n    if hvd.rank() == 0:\n',
            ),
        ),
        'print(f"epoch {epoch}: loss=',
        change(
            TORCH,
            ("hvd.init()\n", "hvd.init()\ndevice = torch.device('cuda', hvd.local_rank())\n"),
            (
                "        optimizer.zero_grad()\n",
                "        x, y = x.to(device), y.to(device)\n        optimizer.zero_grad()\n",
            ),
            (
                "    if hvd.rank() == 0:\n",
                '    print(f"rank {hvd.rank()}, epoch {epoch}: loss={loss.item():.3f}")\n'
                "    if hvd.rank() == 0:\n",
            ),
        ),
    ),
    "unaveraged-metrics: sharded validation without MetricAverageCallback": (
        change(
            KERAS,
            ("    hvd.callbacks.MetricAverageCallback(),\n", ""),
            (
                "x, y = x[",
                "x_val, y_val = x_val[hvd.rank()::hvd.size()], y_val[hvd.rank()::hvd.size()]\nx, y = x[",
            ),
        ),
        "callbacks = [",
        change(
            KERAS,
            (
                "x, y = x[",
                "x_val, y_val = x_val[hvd.rank()::hvd.size()], y_val[hvd.rank()::hvd.size()]\nx, y = x[",
            ),
        ),
    ),
    "unaveraged-metrics: averaged after the best-checkpoint callback": (
        change(
            KERAS,
            ("    hvd.callbacks.MetricAverageCallback(),\n", ""),
            (
                'callbacks.append(tf.keras.callbacks.ModelCheckpoint("ckpt-{epoch}.h5"))',
                'callbacks.append(tf.keras.callbacks.ModelCheckpoint("best.h5", monitor="loss", save_best_only=True))\ncallbacks.append(hvd.callbacks.MetricAverageCallback())',
            ),
        ),
        "callbacks.append(hvd.callbacks.MetricAverageCallback())",
        change(
            KERAS,
            (
                'callbacks.append(tf.keras.callbacks.ModelCheckpoint("ckpt-{epoch}.h5"))',
                'callbacks.append(tf.keras.callbacks.ModelCheckpoint("best.h5", monitor="loss", save_best_only=True))',
            ),
        ),
    ),
    "unaveraged-metrics: PyTorch, a sharded test set": (
        change(
            TORCH,
            (
                "    if hvd.rank() == 0:\n",
                '    correct = (model(x_test).argmax(1) == y_test).float().mean()\n    if hvd.rank() == 0:\n        print(f"accuracy {float(correct):.3f}")\n',
            ),
            (
                "model = torch.nn.Linear",
                "x_test = torch.randn(64, 4)[hvd.rank()::hvd.size()]\ny_test = torch.randint(0, 2, (64,))[hvd.rank()::hvd.size()]\nmodel = torch.nn.Linear",
            ),
        ),
        'print(f"accuracy',
        change(
            TORCH,
            (
                "    if hvd.rank() == 0:\n",
                '    correct = hvd.allreduce((model(x_test).argmax(1) == y_test).float().mean())\n    if hvd.rank() == 0:\n        print(f"accuracy {float(correct):.3f}")\n',
            ),
            (
                "model = torch.nn.Linear",
                "x_test = torch.randn(64, 4)[hvd.rank()::hvd.size()]\ny_test = torch.randint(0, 2, (64,))[hvd.rank()::hvd.size()]\nmodel = torch.nn.Linear",
            ),
        ),
    ),
    "device-rank: the global rank as GPU index": (
        change(TORCH, ("torch.set_num_threads(1)", "torch.cuda.set_device(hvd.rank())")),
        "torch.cuda.set_device(",
        change(TORCH, ("torch.set_num_threads(1)", "torch.cuda.set_device(hvd.local_rank())")),
    ),
    "device-rank: every process on GPU 0": (
        change(TORCH, ("model = torch.nn.Linear(4, 2)", "model = torch.nn.Linear(4, 2).cuda()")),
        "model = torch.nn.Linear(4, 2).cuda()",
        change(
            TORCH,
            (
                "model = torch.nn.Linear(4, 2)",
                "torch.cuda.set_device(hvd.local_rank())\nmodel = torch.nn.Linear(4, 2).cuda()",
            ),
        ),
    ),
    "device-rank: Keras, gpus[hvd.rank()]": (
        change(KERAS, ("gpus[hvd.local_rank()]", "gpus[hvd.rank()]")),
        "tf.config.set_visible_devices(",
        KERAS,
    ),
    "device-rank: DDP, the RANK variable": (
        change(
            DDP,
            (
                "model = DDP(torch.nn.Linear(4, 2))",
                "torch.cuda.set_device(int(os.environ['RANK']))\nmodel = DDP(torch.nn.Linear(4, 2))",
            ),
        ),
        "torch.cuda.set_device(",
        change(
            DDP,
            (
                "model = DDP(torch.nn.Linear(4, 2))",
                "torch.cuda.set_device(local_rank)\nmodel = DDP(torch.nn.Linear(4, 2))",
            ),
        ),
    ),
    "device-hidden": (
        change(
            TORCH,
            (
                "torch.set_num_threads(1)",
                "os.environ['CUDA_VISIBLE_DEVICES'] = str(hvd.local_rank())\ntorch.cuda.set_device(hvd.local_rank())",
            ),
            ("import torch\n", "import os\nimport torch\n"),
        ),
        "torch.cuda.set_device(",
        change(
            TORCH,
            (
                "torch.set_num_threads(1)",
                "os.environ['CUDA_VISIBLE_DEVICES'] = str(hvd.local_rank())\ntorch.cuda.set_device(0)",
            ),
            ("import torch\n", "import os\nimport torch\n"),
        ),
    ),
    "collective-in-rank-branch: a broadcast under if rank == 0": (
        change(
            TORCH,
            (
                "hvd.broadcast_parameters(model.state_dict(), root_rank=0)\n",
                "if hvd.rank() == 0:\n    hvd.broadcast_parameters(model.state_dict(), root_rank=0)\n",
            ),
        ),
        "    hvd.broadcast_parameters(",
        change(
            TORCH,
            (
                "hvd.broadcast_parameters(model.state_dict(), root_rank=0)\n",
                "hvd.broadcast_parameters(model.state_dict(), root_rank=0)\nconfig = hvd.broadcast_object({'lr': lr} if hvd.rank() == 0 else None, root_rank=0)\n",
            ),
        ),
    ),
    "collective-in-rank-branch: DDP, a function called by rank 0 only": (
        change(
            DDP,
            (
                "dist.destroy_process_group()",
                "def report():\n    total = torch.ones(1)\n    dist.all_reduce(total)\n    print(total)\nif dist.get_rank() == 0:\n    report()\ndist.destroy_process_group()",
            ),
        ),
        "    dist.all_reduce(total)",
        change(
            DDP,
            (
                "dist.destroy_process_group()",
                "def report():\n    total = torch.ones(1)\n    dist.all_reduce(total)\n    return total\nif dist.get_rank() == 0:\n    print(report())\nelse:\n    report()\ndist.destroy_process_group()",
            ),
        ),
    ),
    "horovod-argument: the warm-up's lr= (the source documents)": (
        change(
            KERAS,
            ("LearningRateWarmupCallback(initial_lr=lr,", "LearningRateWarmupCallback(lr=lr,"),
        ),
        "hvd.callbacks.LearningRateWarmupCallback(",
        KERAS,
    ),
    "horovod-argument: num_groups, from-import": (
        change(
            TORCH,
            (
                "named_parameters=model.named_parameters())",
                "named_parameters=model.named_parameters(), num_groups=2)",
            ),
        ),
        "optimizer = hvd.DistributedOptimizer(",
        change(
            TORCH,
            (
                "named_parameters=model.named_parameters())",
                "named_parameters=model.named_parameters(), groups=2)",
            ),
        ),
    ),
    "horovod-argument: a broadcast callback without its root rank": (
        change(
            KERAS, ("BroadcastGlobalVariablesCallback(0)", "BroadcastGlobalVariablesCallback()")
        ),
        "BroadcastGlobalVariablesCallback(",
        change(
            KERAS,
            (
                "BroadcastGlobalVariablesCallback(0)",
                "BroadcastGlobalVariablesCallback(root_rank=0)",
            ),
        ),
    ),
    "horovod-argument: compile(experimental_run_tf_function=False)": (
        change(
            KERAS,
            (
                'loss="sparse_categorical_crossentropy")',
                'loss="sparse_categorical_crossentropy", experimental_run_tf_function=False)',
            ),
        ),
        "model.compile(",
        KERAS,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_failing_script_is_found_at_its_line(case):
    rule = case.split(":")[0]
    failing, fragment, _ = CASES[case]
    failing = textwrap.dedent(failing)
    assert (rule, line_of(failing, fragment)) in findings(failing), findings(failing)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_passing_script_gives_no_finding_of_that_rule(case):
    rule = case.split(":")[0]
    passing = CASES[case][2]
    assert [f for f in findings(passing) if f[0] == rule] == []


# correct scripts in styles the course's own do not use, each once reported by mistake
CORRECT = {
    "the steps divided from a count of batches, Adam's rate scaled (lr-rule)": change(
        KERAS,
        ("lr = 1e-3", "num_batches = 60000 // 64\nsteps = num_batches // hvd.size()\nlr = 1e-3"),
        ("epochs=3,", "epochs=3, steps_per_epoch=steps,"),
    ),
    "one pass over the data with a shuffling DistributedSampler (sampler-epoch)": change(
        DDP, ("for epoch in range(3):\n    sampler.set_epoch(epoch)\n", "if True:\n")
    ),
    "lines on every rank that name no metric (every-rank-logs)": change(
        TORCH,
        (
            "torch.set_num_threads(1)\n",
            "torch.set_num_threads(1)\n"
            'print("mixed precision:", torch.cuda.is_available())\n'
            'print(f"accelerator: {torch.cuda.is_available()}")\n'
            "accumulation_steps = 4\n"
            'print("gradient accumulation over", accumulation_steps, "batches")\n',
        ),
    ),
    "a Horovod script that also starts torch.distributed, its sampler without rank "
    "(unsharded-data)": change(
        TORCH,
        ("hvd.init()\n", "hvd.init()\ntorch.distributed.init_process_group('gloo')\n"),
        (
            "DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())",
            "DistributedSampler(dataset)",
        ),
    ),
    "CUDA_VISIBLE_DEVICES set to the local rank, then the default GPU (device-rank)": change(
        TORCH,
        ("import torch\n", "import os\nimport torch\n"),
        (
            "hvd.init()\n",
            'hvd.init()\nos.environ["CUDA_VISIBLE_DEVICES"] = str(hvd.local_rank())\n',
        ),
        ("model = torch.nn.Linear(4, 2)", "model = torch.nn.Linear(4, 2).cuda()"),
    ),
    "a fresh optimizer whose state is not broadcast (missing-broadcast)": change(
        TORCH, ("hvd.broadcast_optimizer_state(optimizer, root_rank=0)\n", "")
    ),
    "a global batch divided among the workers as global_bs, the rate kept (unscaled-lr)": change(
        TORCH,
        ("lr = 0.01 * hvd.size()", "lr = 0.01"),
        (
            "loader = DataLoader(",
            "global_bs = 64\nlocal_bs = global_bs // hvd.size()\nloader = DataLoader(",
        ),
        ("batch_size=16,", "batch_size=local_bs,"),
    ),
    "Hugging Face's Trainer, DDP inside (missing-init)": """\
import torch
from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
args = TrainingArguments(output_dir="out", per_device_train_batch_size=8)
Trainer(model=model, args=args, train_dataset=torch.load("train.pt")).train()
""",
}


@pytest.mark.parametrize("case", sorted(CORRECT))
def test_a_correct_script_in_another_style_gives_no_finding(case):
    assert [f.format() for f in lint_source(CORRECT[case], "t.py") if not f.note] == []


def test_only_the_training_sampler_needs_set_epoch():
    """A shuffling evaluation sampler without set_epoch is no mistake; the training one is."""
    text = change(
        TORCH,
        ("    sampler.set_epoch(epoch)\n", ""),
        (
            "loader = DataLoader(dataset, batch_size=16, sampler=sampler)\n",
            "loader = DataLoader(dataset, batch_size=16, sampler=sampler)\n"
            "test_sampler = DistributedSampler(dataset, num_replicas=hvd.size(), rank=hvd.rank())\n"
            "test_loader = DataLoader(dataset, batch_size=64, sampler=test_sampler)\n",
        ),
    )
    found = [line for rule, line in findings(text) if rule == "sampler-epoch"]
    assert found == [line_of(text, "sampler = DistributedSampler(")]


def test_every_static_rule_has_a_case():
    static = {name for name in RULES if not name.startswith("run-") and name != "framework"}
    assert static == {case.split(":")[0] for case in CASES}
