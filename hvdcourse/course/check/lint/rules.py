"""The rules of ``hvdcourse-lint``: each mistake's name, its fix and the lesson that explains it
(lessons: Converting a Keras MNIST script to Horovod; PyTorch with Horovod, and DDP).

A finding reads ``file:line: rule: what is wrong; fix: ... (lesson ...)``. What is wrong is the
check's own sentence (it names the line's variables); the fix and the lesson depend on the rule and
on the script's framework, one of :data:`FLAVOURS`.
"""

from __future__ import annotations

from dataclasses import dataclass

# the frameworks a script may use: Horovod with TensorFlow/Keras, Horovod with PyTorch, PyTorch DDP
FLAVOURS = ("keras", "torch", "ddp")

L05 = "lesson 05, Converting a Keras MNIST script to Horovod"
L09 = "lesson 09, PyTorch with Horovod, and DDP"
L10 = "lesson 10, Faults, hangs and elastic training"
L16 = "lesson 16, Installing Horovod"


@dataclass(frozen=True)
class Rule:
    """One mistake: its name, a one-line summary, and per flavour the fix and the lesson."""

    name: str
    summary: str
    fix: dict
    lesson: dict

    def fix_for(self, flavour: str) -> str:
        return _pick(self.fix, flavour)

    def lesson_for(self, flavour: str) -> str:
        return _pick(self.lesson, flavour)


def _pick(table: dict, flavour: str) -> str:
    """The entry for ``flavour``; DDP falls back to PyTorch's, PyTorch's to Keras'."""
    for key in {"ddp": ("ddp", "torch", "keras"), "torch": ("torch", "keras")}.get(
        flavour, (flavour, "keras")
    ):
        if table.get(key):
            return table[key]
    return table["keras"]


@dataclass(frozen=True)
class Finding:
    """A mistake found at ``line`` (``note``: the tool cannot tell, never counted as a mistake)."""

    path: str
    line: int
    rule: str
    what: str
    flavour: str = "keras"
    note: bool = False

    def format(self) -> str:
        if self.note:
            return f"{self.path}:{self.line}: {self.rule}: cannot tell: {self.what}"
        rule = RULES[self.rule]
        return (
            f"{self.path}:{self.line}: {self.rule}: {self.what}; fix: "
            f"{rule.fix_for(self.flavour)} ({rule.lesson_for(self.flavour)})"
        )


def _rule(name, summary, fix, lesson) -> Rule:
    if isinstance(fix, str):
        fix = {"keras": fix}
    if isinstance(lesson, str):
        lesson = {"keras": lesson}
    return Rule(name, summary, fix, lesson)


_TORCH_LESSONS = {
    "init": f"{L09}: Initialise, share the cores, seed per rank",
    "data": f"{L09}: Give each rank its part of the data: DistributedSampler",
    "wrap": f"{L09}: Scale the learning rate, wrap the optimizer, broadcast rank 0's state",
    "loop": f"{L09}: The training loop: averaged loss, rank-0 checkpoints",
    "ddp": f"{L09}: The DDP version",
}

RULES = {
    rule.name: rule
    for rule in (
        _rule(
            "undefined-name",
            "a name is used before anything defines it",
            "define it first, or use the name the script defines (a NameError stops every rank)",
            f"{L05}, Exercise 11",
        ),
        _rule(
            "missing-init",
            "Horovod or the process group is not started before the first distributed call",
            {
                "keras": "import horovod.tensorflow.keras as hvd and call hvd.init() first, "
                "before any other hvd call",
                "torch": "import horovod.torch as hvd and call hvd.init() first, before any other "
                "hvd call",
                "ddp": "call torch.distributed.init_process_group() first (torchrun sets its "
                "environment)",
            },
            {
                "keras": f"{L05}, step 1",
                "torch": _TORCH_LESSONS["init"],
                "ddp": _TORCH_LESSONS["ddp"],
            },
        ),
        _rule(
            "unwrapped-optimizer",
            "the gradients are not averaged over the ranks, or the wrapper comes after a use",
            {
                "keras": "wrap the optimizer, optimizer = hvd.DistributedOptimizer(optimizer), "
                "before model.compile (a hand-written loop: tape = hvd.DistributedGradientTape(tape))",
                "torch": "optimizer = hvd.DistributedOptimizer(optimizer, "
                "named_parameters=model.named_parameters()) before the first step",
                "ddp": "wrap the model, ddp_model = DistributedDataParallel(model), and train "
                "through ddp_model",
            },
            {
                "keras": f"{L05}, step 4",
                "torch": _TORCH_LESSONS["wrap"],
                "ddp": _TORCH_LESSONS["ddp"],
            },
        ),
        _rule(
            "missing-broadcast",
            "the ranks do not start from rank 0's weights and optimizer state",
            {
                "keras": "add hvd.callbacks.BroadcastGlobalVariablesCallback(0) to the callbacks "
                "of fit (a hand-written loop: hvd.broadcast_variables(model.variables, "
                "root_rank=0) and the optimizer's variables once they exist)",
                "torch": "hvd.broadcast_parameters(model.state_dict(), root_rank=0) and "
                "hvd.broadcast_optimizer_state(optimizer, root_rank=0) before the first step",
                "ddp": "wrap the model in DistributedDataParallel: it sends rank 0's weights to "
                "every rank",
            },
            {
                "keras": f"{L05}, step 5",
                "torch": _TORCH_LESSONS["wrap"],
                "ddp": _TORCH_LESSONS["ddp"],
            },
        ),
        _rule(
            "early-broadcast",
            "the optimizer's variables are broadcast before they exist",
            "create them first, optimizer.build(model.trainable_variables), or broadcast after "
            "the first step (BroadcastGlobalVariablesCallback does)",
            f"{L05}, step 4 and step 5",
        ),
        _rule(
            "unscaled-lr",
            "the learning rate is not scaled with the number of workers",
            {
                "keras": "multiply it by hvd.size() for SGD, by hvd.size() ** 0.5 for Adam and "
                "other adaptive optimizers (training.scaled_lr does), with a warm-up",
                "ddp": "multiply it by dist.get_world_size() for SGD, by dist.get_world_size() "
                "** 0.5 for Adam and other adaptive optimizers, with a warm-up",
            },
            {"keras": f"{L05}, step 4: the course's rule", "torch": _TORCH_LESSONS["wrap"]},
        ),
        _rule(
            "lr-rule",
            "the learning rate is scaled by another rule than the course's for this optimizer",
            "linear (x N) for SGD, square root (x N ** 0.5) for Adam, RMSprop, Adadelta and other "
            "adaptive optimizers; a script that divides the batch by N keeps the rate",
            {"keras": f"{L05}, step 4: the course's rule", "torch": _TORCH_LESSONS["wrap"]},
        ),
        _rule(
            "missing-warmup",
            "the scaled learning rate is used from the first step, with no warm-up",
            {
                "keras": "add hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, "
                "warmup_epochs=...) to the callbacks",
                "torch": "ramp the rate from lr / N up to lr over the first epochs (a LambdaLR, "
                "or torch_training.LearningRateWarmup)",
            },
            {"keras": f"{L05}, step 5", "torch": _TORCH_LESSONS["wrap"]},
        ),
        _rule(
            "momentum-correction",
            "Horovod's warm-up corrects the momentum of a TensorFlow 2.11+ optimizer, which fails",
            "pass momentum_correction=False to the warm-up callback (the first step fails with "
            "AttributeError: 'float' object has no attribute 'dtype')",
            f"{L05}, Exercise 6",
        ),
        _rule(
            "unsharded-data",
            "every rank trains on the whole data set",
            {
                "keras": "give each rank its part: data.shard(x, hvd.rank(), hvd.size()), "
                "x[hvd.rank()::hvd.size()] or dataset.shard(hvd.size(), hvd.rank())",
                "torch": "DataLoader(..., sampler=DistributedSampler(dataset, "
                "num_replicas=hvd.size(), rank=hvd.rank()))",
                "ddp": "DataLoader(..., sampler=DistributedSampler(dataset))",
            },
            {
                "keras": f"{L05}, step 3",
                "torch": _TORCH_LESSONS["data"],
                "ddp": _TORCH_LESSONS["data"],
            },
        ),
        _rule(
            "sampler-epoch",
            "a shuffling DistributedSampler without set_epoch repeats one order every epoch",
            "call sampler.set_epoch(epoch) at the start of every epoch",
            {"keras": _TORCH_LESSONS["data"]},
        ),
        _rule(
            "unscaled-steps",
            "the steps per epoch are counted on the whole data set, not divided by the workers",
            {
                "keras": "divide by the number of workers too: len(x) // (batch_size * hvd.size()) "
                "(training.steps_per_epoch(len(x), batch_size, hvd.size()))",
                "ddp": "divide by the number of workers too: len(x) // (batch_size * "
                "dist.get_world_size())",
            },
            {"keras": f"{L05}, step 3", "torch": _TORCH_LESSONS["data"]},
        ),
        _rule(
            "every-rank-checkpoints",
            "every rank writes the checkpoint",
            {
                "keras": "write it on rank 0 only: if hvd.rank() == 0: (a callback: add it to the "
                "list on rank 0 only)",
                "torch": "write it on rank 0 only: if hvd.rank() == 0:",
                "ddp": "write it on rank 0 only: if dist.get_rank() == 0:",
            },
            {"keras": f"{L05}, step 6", "torch": _TORCH_LESSONS["loop"]},
        ),
        _rule(
            "every-rank-logs",
            "every rank writes the same log, TensorBoard file or metric line",
            {
                "keras": "log on rank 0 only: if hvd.rank() == 0:, and in fit or evaluate "
                "verbose=2 if hvd.rank() == 0 else 0",
                "torch": "log on rank 0 only: if hvd.rank() == 0:",
                "ddp": "log on rank 0 only: if dist.get_rank() == 0:",
            },
            {"keras": f"{L05}, step 6", "torch": _TORCH_LESSONS["loop"]},
        ),
        _rule(
            "unaveraged-metrics",
            "metrics of one rank's part are printed or pick a checkpoint without an average",
            {
                "keras": "add hvd.callbacks.MetricAverageCallback() before any callback that "
                "reads the metrics",
                "torch": "average them first: hvd.allreduce(value), or sum the parts with "
                "hvd.allreduce(..., op=hvd.Sum)",
                "ddp": "sum the parts first: dist.all_reduce(tensor), then divide",
            },
            {"keras": f"{L05}, step 5", "torch": _TORCH_LESSONS["loop"]},
        ),
        _rule(
            "device-rank",
            "the GPU is not chosen by the local rank",
            {
                "keras": "keep one GPU per process, gpus[hvd.local_rank()]: "
                "tf.config.set_visible_devices(gpus[hvd.local_rank()], 'GPU')",
                "torch": "torch.cuda.set_device(hvd.local_rank()), or "
                "devices.torch_device(hvd.local_rank(), hvd.local_size())",
                "ddp": "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))",
            },
            {"keras": f"{L05}, step 2", "torch": _TORCH_LESSONS["init"]},
        ),
        _rule(
            "device-hidden",
            "the script hides the other GPUs, then asks for GPU number local_rank",
            "after CUDA_VISIBLE_DEVICES leaves one GPU, that GPU is number 0: use device 0, or "
            "let devices.gpu_index choose",
            {"keras": f"{L05}, step 2", "torch": _TORCH_LESSONS["init"]},
        ),
        _rule(
            "collective-in-rank-branch",
            "a collective runs on some ranks only: the others never join it, and the job hangs",
            "call it on every rank, outside the if on the rank (only what rank 0 alone does, "
            "printing or writing, goes inside)",
            L10,
        ),
        _rule(
            "horovod-argument",
            "an argument that Horovod's (or Keras') function does not take, or no longer uses",
            "use the arguments of Horovod 0.28.1 (LearningRateWarmupCallback(initial_lr=...), "
            "groups= instead of num_groups=, op=hvd.Average instead of average=), and leave "
            "compile's experimental_run_tf_function out",
            f"{L16}: Troubleshooting, and the errata page",
        ),
        _rule(
            "run-weights",
            "on a 2-rank run the ranks' weights differ at the first step or after one",
            {
                "keras": "broadcast rank 0's state (BroadcastGlobalVariablesCallback(0)) and "
                "average the gradients (hvd.DistributedOptimizer)",
                "torch": "hvd.broadcast_parameters(model.state_dict(), root_rank=0) before the "
                "first step, and hvd.DistributedOptimizer around the optimizer",
                "ddp": "train through the DistributedDataParallel wrapper",
            },
            {
                "keras": f"{L05}, step 5",
                "torch": _TORCH_LESSONS["wrap"],
                "ddp": _TORCH_LESSONS["ddp"],
            },
        ),
        _rule(
            "run-writes",
            "on a 2-rank run a rank other than 0 wrote files",
            {
                "keras": "write checkpoints and logs on rank 0 only: if hvd.rank() == 0:",
                "ddp": "write checkpoints and logs on rank 0 only: if dist.get_rank() == 0:",
            },
            {"keras": f"{L05}, step 6", "torch": _TORCH_LESSONS["loop"]},
        ),
        _rule(
            "run-data",
            "on a 2-rank run both ranks trained on the same batches",
            {
                "keras": "shard the data: data.shard(x, hvd.rank(), hvd.size()) or "
                "dataset.shard(hvd.size(), hvd.rank())",
                "torch": "DataLoader(..., sampler=DistributedSampler(dataset, "
                "num_replicas=hvd.size(), rank=hvd.rank()))",
                "ddp": "DataLoader(..., sampler=DistributedSampler(dataset))",
            },
            {"keras": f"{L05}, step 3", "torch": _TORCH_LESSONS["data"]},
        ),
        _rule(
            "framework", "the script uses a framework that hvdcourse-lint does not check", "", ""
        ),
    )
}


class Report:
    """The findings and notes of one script; a note at most once per rule."""

    def __init__(self, path: str, flavour: str | None):
        assert flavour in FLAVOURS or flavour is None, flavour
        self.path, self.flavour = path, flavour or "keras"
        self.items: list = []
        self._noted: set = set()

    def finding(self, rule: str, node, what: str) -> None:
        assert rule in RULES, rule
        self.items.append(Finding(self.path, _line(node), rule, what, self.flavour))

    def note(self, rule: str, node, why: str) -> None:
        """Say once per rule that the tool cannot tell (never a finding)."""
        assert rule in RULES, rule
        if rule not in self._noted:
            self._noted.add(rule)
            self.items.append(Finding(self.path, _line(node), rule, why, self.flavour, note=True))


def _line(node) -> int:
    return node if isinstance(node, int) else getattr(node, "lineno", 1)
