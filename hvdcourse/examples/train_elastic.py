"""Horovod Elastic trainer: train on as many workers as there are, survive the loss of one (lesson: Faults, hangs and elastic training).

Run with Gloo (elastic mode needs it), between 1 and 2 workers on this machine::

    echo localhost:2 > hosts.txt
    horovodrun -np 2 --min-np 1 --max-np 2 --network-interface lo \\
        --host-discovery-script "python -m hvdcourse.runtime.discover_hosts --hosts-file hosts.txt" \\
        python -m hvdcourse.examples.train_elastic --epochs 4

What changes from ``train_hvd.py``:

* the model, the optimizer and the progress (``epoch``, ``batch``) live in a
  ``hvd.elastic.KerasState`` that every worker commits to its own memory every
  ``--batches-per-commit`` steps;
* the training function is wrapped in ``@hvd.elastic.run``: when a worker dies or the hosts change,
  the survivors roll back to the last commit, form a new ring, take rank 0's state and call the
  function again, which carries on from the committed epoch and batch;
* what depends on the number of workers (data shards, steps per epoch, learning rate) is computed
  inside that function or in a reset callback, never once at start.
"""

from __future__ import annotations

import sys

from hvdcourse.examples import data, training
from hvdcourse.examples.model import build_model, loss_fn


def parser():
    """The trainers' shared options (:func:`hvdcourse.examples.cli.training_parser`) less the checkpoint
    and warm-up ones (the state lives in memory, committed by every worker), plus ``--batches-per-commit``."""
    from hvdcourse.examples.cli import positive_int, training_parser

    p = training_parser(
        "Train the course's MNIST CNN with Horovod Elastic (workers may leave or join while "
        "it runs).",
        checkpoints=False,
        warmup=False,
    )
    p.set_defaults(batch_size=32, threads=1)
    p.add_argument(
        "--batches-per-commit",
        type=positive_int,
        default=1,
        help="commit the state every N steps (default 1): a failure loses at most N steps",
    )
    return p


def main(argv=None, callbacks=()) -> int:
    """Train; ``callbacks``: extra Keras callbacks (e.g. :mod:`hvdcourse.course.lessons.faults`)."""
    args = parser().parse_args(argv)

    # The frameworks are imported here, after the options: --help and a wrong option answer at once.
    import tensorflow as tf

    # Horovod: the Keras flavour of Horovod's API, with its elastic mode (hvd.elastic).
    import horovod.tensorflow.keras as hvd

    # Horovod: join the job that the elastic driver (horovodrun) manages.
    hvd.init()
    # Horovod: the processes of a node share its cores.
    training.set_threads(args.threads, hvd.local_size())
    tf.keras.utils.set_random_seed(args.seed)

    # Horovod: rank 0 alone says where the data comes from.
    dataset = data.load_mnist(args.data, download=args.download, quiet=hvd.rank() != 0)
    x_train, y_train = data.to_model_inputs(dataset.x_train, dataset.y_train)
    x_test, y_test = data.to_model_inputs(dataset.x_test, dataset.y_test)

    model = build_model()
    # Horovod: the wrapped optimizer averages the gradients of all ranks; the rate grows with the
    # number of workers (for Adam, by sqrt(N)).
    optimizer = hvd.DistributedOptimizer(
        tf.keras.optimizers.Adam(learning_rate=training.scaled_lr(args.lr, hvd.size(), "adam"))
    )
    model.compile(optimizer=optimizer, loss=loss_fn(), metrics=["accuracy"])
    # Horovod: create Adam's slots now, so that the state below is complete.
    optimizer.build(model.trainable_variables)
    # Horovod: what survives a failure: the model, the optimizer and the progress, in memory.
    state = hvd.elastic.KerasState(model, optimizer, epoch=0, batch=0)

    def on_reset():
        # Horovod: after a worker left or joined, the rate follows the new number of workers.
        optimizer.learning_rate.assign(training.scaled_lr(args.lr, hvd.size(), "adam"))

    state.register_reset_callbacks([on_reset])
    # Horovod: the state follows the epochs and batches, and is committed every N steps.
    progress = [
        hvd.elastic.UpdateEpochStateCallback(state),
        _BatchProgress(state),
        hvd.elastic.CommitStateCallback(state, batches_per_commit=args.batches_per_commit),
        *callbacks,
    ]

    # Horovod: on a failure, roll back to the last commit, re-form the ring and call again.
    @hvd.elastic.run
    def train(state):
        # Horovod: what depends on the number of workers is computed at every (re)start.
        rank, size = hvd.rank(), hvd.size()
        steps = training.steps_per_epoch(len(x_train), args.batch_size, size, args.max_steps)
        # Horovod: rank 0 says, at each (re)start, with how many workers and from where it goes on.
        if rank == 0:
            announce_start(state, optimizer, size, steps)
        # Horovod: each rank trains on its own part of the data, every N-th image.
        ds = training.train_dataset(
            data.shard(x_train, rank, size),
            data.shard(y_train, rank, size),
            args.batch_size,
            args.seed + 1000 * state.epoch + rank,
        )
        verbose = 2 if rank == 0 else 0
        if state.batch:  # resume inside an epoch: finish its remaining steps first
            state.model.fit(
                ds,
                steps_per_epoch=max(1, steps - state.batch),
                epochs=1,
                callbacks=progress,
                verbose=verbose,
            )
        if args.epochs > state.epoch:
            state.model.fit(
                ds,
                steps_per_epoch=steps,
                epochs=args.epochs - state.epoch,
                callbacks=progress,
                verbose=verbose,
            )

    train(state)

    metrics = training.evaluate(model, x_test, y_test)  # the whole test set on each worker (small)
    # Horovod: every rank prints its result (equal digests: equal weights); rank 0 writes the file.
    return training.finish(
        "train_elastic",
        metrics,
        model,
        args.metrics_json,
        workers=hvd.size(),
        rank=hvd.rank(),
        epochs=state.epoch,
        optimizer_iterations=int(optimizer.iterations.numpy()),
    )


def announce_start(state, optimizer, workers: int, steps: int) -> None:
    """Rank 0's line and ``start`` record at each start of the training function (the lesson and
    its tests read them)."""
    start = {
        "workers": workers,
        "epoch": state.epoch,
        "batch": state.batch,
        "optimizer_iterations": int(optimizer.iterations.numpy()),
        "lr": float(optimizer.learning_rate.numpy()),
        "steps_per_epoch": steps,
    }
    print(
        f"[train_elastic] workers={workers} start epoch={state.epoch} batch={state.batch} "
        f"optimizer_iterations={start['optimizer_iterations']} "
        f"lr={start['lr']:g} steps/epoch={steps}",
        flush=True,
    )
    training.report("start", start)


# the line rank 0 prints when the training function starts (again, after a change of workers)
START_LINE = "[train_elastic] workers="


def run_on_this_machine(
    trainer_args: list,
    hosts_file: str,
    hosts: list,
    np: int = 2,
    min_np: int = 1,
    then_hosts: list | None = None,
    when: str = "Epoch 2/",
    fault: dict | None = None,
    timeout: float = 300,
    cwd: str | None = None,
    echo: bool = False,
    also: tuple = (),
):
    """Run this trainer under ``horovodrun``'s elastic mode on this machine; return ``(run, events)``.

    ``hosts`` (``[(host, slots)]``) go into ``hosts_file``, which the discovery command reads every
    second; ``then_hosts`` replace them when a line containing ``when`` appears (a host leaves).
    ``fault`` (``dict(rank=1, at_step=25, mode="kill")``, and ``once=PATH`` to fail only once) is
    injected with :mod:`hvdcourse.course.lessons.faults`.
    ``events`` maps ``"changed"``, ``"fault"`` and ``"resumed"`` (the first restart of the training
    function) to seconds since the start, and ``"starts"``/``"done"`` to the records the workers
    reported: rank 0's at each start of the training function (``workers``, ``epoch``, ``batch``,
    ``optimizer_iterations``, ``lr``, ``steps_per_epoch``), in order, and each worker's final metrics
    (``workers``, ``epochs``, ``optimizer_iterations``, ``accuracy``, ``weights_sha256``...).
    ``"start_times"``: ``(seconds, workers)`` of every start of the training function, and each
    string of ``also`` maps to the seconds of the first line that contains it.
    """
    import time

    from hvdcourse.runtime.discover_hosts import discovery_command, write_hosts
    from hvdcourse.runtime.launch import run_ranks

    write_hosts(hosts_file, hosts)
    start, events = time.monotonic(), {"start_times": []}

    def on_line(line):
        now = time.monotonic() - start
        for text in also:
            if text not in events and text in line:
                events[text] = now
        if START_LINE in line:
            workers = line.split(START_LINE, 1)[1].split()[0]
            events["start_times"].append((now, int(workers) if workers.isdigit() else None))
        if then_hosts is not None and "changed" not in events and when in line:
            write_hosts(hosts_file, then_hosts)
            events["changed"] = now
        if "fault" not in events and "[hvdcourse.faults]" in line:
            events["fault"] = now
        if (
            "resumed" not in events
            and START_LINE in line
            and ("changed" in events or "fault" in events)
        ):
            events["resumed"] = now

    env, program = {}, [sys.executable, "-m", "hvdcourse.examples.train_elastic", *trainer_args]
    if fault:
        env = {
            "HVDCOURSE_FAIL_RANK": str(fault.get("rank", 1)),
            "HVDCOURSE_FAIL_AT_STEP": str(fault["at_step"]),
            "HVDCOURSE_FAIL_MODE": fault.get("mode", "kill"),
        }
        if fault.get("once"):  # a file: a worker that joins later does not fail again
            env["HVDCOURSE_FAIL_ONCE"] = fault["once"]
        program = [
            sys.executable,
            "-m",
            "hvdcourse.course.lessons.faults",
            "hvdcourse.examples.train_elastic",
            *trainer_args,
        ]
    run = run_ranks(
        program,
        np=np,
        launcher="elastic",
        min_np=min_np,
        timeout=timeout,
        env=env,
        cwd=cwd,
        discovery=discovery_command(hosts_file),
        on_line=on_line,
        echo=echo,
    )
    # the worker that became rank 0 may not be the first: order the starts by training progress
    events["starts"] = sorted(run.records("start"), key=lambda r: r["optimizer_iterations"])
    events["done"] = run.records("final")
    return run, events


def _BatchProgress(state):
    """Keep ``state.batch`` = steps done in the current epoch, across resumed ``fit`` calls.

    (Horovod's ``UpdateBatchStateCallback`` counts from 0 in every ``fit`` call, and TF 2 Keras
    ignores the shortened step count it sets, so a resumed epoch would restart from its first step.)
    """
    import tensorflow as tf

    class BatchProgress(tf.keras.callbacks.Callback):
        offset = 0

        def on_train_begin(self, logs=None):
            self.offset = state.batch

        def on_train_batch_end(self, batch, logs=None):
            state.batch = self.offset + batch + 1

        def on_epoch_end(self, epoch, logs=None):
            state.batch = self.offset = 0

    return BatchProgress()


if __name__ == "__main__":
    from hvdcourse.examples.cli import run_trainer

    sys.exit(run_trainer(main))
