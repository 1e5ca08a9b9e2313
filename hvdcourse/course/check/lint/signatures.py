"""The arguments of Horovod 0.28.1's functions, read off its source, and the rule that checks the
script's calls against them (lesson: Installing Horovod).

``LearningRateWarmupCallback(lr=...)`` (the source documents' call) is a ``TypeError`` in every
Horovod version; ``num_groups=`` and ``average=`` still run but are deprecated; Keras' own
``compile(experimental_run_tf_function=False)`` does nothing since TensorFlow 2.2.
"""

from __future__ import annotations

import ast

from hvdcourse.course.check.lint.facts import Facts
from hvdcourse.course.check.lint.rules import Report

# member -> (parameters in order, how many are required); from Horovod 0.28.1's source
_KERAS = {
    "DistributedOptimizer": (
        "optimizer name device_dense device_sparse compression sparse_as_dense "
        "gradient_predivide_factor op backward_passes_per_step average_aggregated_gradients "
        "num_groups groups process_set scale_local_gradients",
        1,
    ),
    "broadcast_global_variables": ("root_rank", 1),
    "allreduce": ("value name average prescale_factor postscale_factor op compression", 1),
    "allgather": ("value name", 1),
    "broadcast": ("value root_rank name", 2),
    "reducescatter": ("value name op", 1),
    "load_model": ("filepath custom_optimizers custom_objects compression legacy_opts", 1),
    "callbacks.BroadcastGlobalVariablesCallback": ("root_rank device local_variables", 1),
    "callbacks.MetricAverageCallback": ("device", 0),
    "callbacks.LearningRateScheduleCallback": (
        "initial_lr multiplier start_epoch end_epoch staircase momentum_correction steps_per_epoch",
        2,
    ),
    "callbacks.LearningRateWarmupCallback": (
        "initial_lr warmup_epochs momentum_correction steps_per_epoch verbose",
        1,
    ),
    "callbacks.BestModelCheckpoint": ("monitor verbose save_weights_only mode save_freq", 0),
}
_TF = {
    "allreduce": (
        "tensor average device_dense device_sparse compression op prescale_factor "
        "postscale_factor name process_set ignore_name_scope",
        1,
    ),
    "grouped_allreduce": (
        "tensors average device_dense device_sparse compression op prescale_factor "
        "postscale_factor process_set ignore_name_scope name",
        1,
    ),
    "DistributedOptimizer": (
        "optimizer name use_locking device_dense device_sparse compression sparse_as_dense "
        "backward_passes_per_step op gradient_predivide_factor average_aggregated_gradients "
        "num_groups groups process_set scale_local_gradients",
        1,
    ),
    "DistributedGradientTape": (
        "gradtape device_dense device_sparse compression sparse_as_dense op "
        "gradient_predivide_factor num_groups groups process_set scale_local_gradients",
        1,
    ),
    "broadcast_variables": ("variables root_rank process_set inplace", 2),
    "broadcast_object": ("obj root_rank session name process_set", 1),
    "allgather_object": ("obj session name process_set", 1),
    "allgather": ("tensor name ignore_name_scope process_set", 1),
    "broadcast": ("tensor root_rank name ignore_name_scope process_set", 2),
    "alltoall": ("tensor splits name ignore_name_scope process_set", 1),
}
_TORCH = {
    "DistributedOptimizer": (
        "optimizer named_parameters compression backward_passes_per_step op "
        "gradient_predivide_factor num_groups groups sparse_as_dense process_set",
        1,
    ),
    "broadcast_parameters": ("params root_rank", 2),
    "broadcast_optimizer_state": ("optimizer root_rank model", 2),
    "broadcast_object": ("obj root_rank name process_set", 1),
    "allgather_object": ("obj name", 1),
    "allreduce": (
        "tensor average name compression op prescale_factor postscale_factor process_set",
        1,
    ),
    "allreduce_": ("tensor average name op prescale_factor postscale_factor process_set", 1),
    "allgather": ("tensor name process_set", 1),
    "broadcast": ("tensor root_rank name process_set", 2),
    "broadcast_": ("tensor root_rank name process_set", 2),
    "join": ("device", 0),
    "barrier": ("process_set", 0),
}
SIGNATURES = {
    flavour: {member: (params.split(), required) for member, (params, required) in table.items()}
    for flavour, table in (("keras", _KERAS), ("tf", _TF), ("torch", _TORCH))
}
DEPRECATED = {"num_groups": "groups=", "average": "op=hvd.Average"}
# an argument that does not exist, and the one meant
MEANT = {"lr": "initial_lr", "learning_rate": "initial_lr", "root": "root_rank"}


def check_arguments(f: Facts, report: Report) -> None:
    s = f.script
    for call in s.calls:
        if not isinstance(call.func, (ast.Name, ast.Attribute)):
            continue
        member = s.horovod_member(call.func)
        if member is None:
            if call in f.compiles and s.keyword(call, "experimental_run_tf_function") is not None:
                report.finding(
                    "horovod-argument",
                    call,
                    "compile(experimental_run_tf_function=...) was a TensorFlow 2.0/2.1 "
                    "work-around of Horovod's examples; today's Keras ignores it",
                )
            continue
        flavour, name = member
        signature = SIGNATURES[flavour].get(name)
        if signature is None or any(isinstance(a, ast.Starred) for a in call.args):
            continue
        params, required = signature
        shown = f"{s.words(call.func)}"
        if len(call.args) > len(params):
            report.finding(
                "horovod-argument",
                call,
                f"{shown} takes at most {len(params)} positional arguments, it gets "
                f"{len(call.args)}",
            )
            continue
        given = set(params[: len(call.args)])
        for kw in call.keywords:
            if kw.arg is None:  # **options: not readable
                given = set(params)
                break
            if kw.arg not in params:
                meant = MEANT.get(kw.arg)
                hint = f" (the argument is {meant})" if meant in params else ""
                report.finding(
                    "horovod-argument",
                    call,
                    f"{shown} has no argument {kw.arg!r}{hint}: a TypeError when the line runs",
                )
            elif kw.arg in DEPRECATED:
                report.finding(
                    "horovod-argument",
                    call,
                    f"{shown}'s argument {kw.arg!r} is deprecated; use {DEPRECATED[kw.arg]}",
                )
            given.add(kw.arg)
        missing = [p for p in params[:required] if p not in given]
        if missing and not any(kw.arg and kw.arg not in params for kw in call.keywords):
            report.finding(
                "horovod-argument",
                call,
                f"{shown} needs the argument {missing[0]!r}: a TypeError when the line runs",
            )
