"""Live per-rank metrics for Prometheus (lesson: Watch a training run: Prometheus and a straggler).

With ``--metrics-port BASE`` each rank of a trainer serves ``http://<node>:BASE+local_rank/metrics``
(``prometheus_client``'s text format, on all interfaces, so that a Prometheus on another node can
scrape it). Every series carries the label ``rank``:

==========================================  ================================================================
``hvdcourse_images_total``                  images this rank has trained on (``rate()`` of it: images/s)
``hvdcourse_images_per_second``             the last step's images / its wall time
``hvdcourse_step_seconds`` (a histogram:    wall time of each step, from the end of the previous step to the
``_bucket``, ``_sum``, ``_count``)          end of this one (callbacks and input included)
``hvdcourse_loss``                          the training loss after the step: this rank's running mean over
                                            the epoch so far (what Keras reports)
``hvdcourse_allreduce_wait_seconds``        per step, from the moment this rank's last gradient is ready to the
(a histogram, as above)                     moment the averaged gradients are back: the allreduce itself plus
                                            the wait for the slowest rank to send its gradients
==========================================  ================================================================

and the process' own ``process_cpu_seconds_total``, ``process_resident_memory_bytes``, ... (with the
label ``rank`` too).

Two trainers serve them: ``train_hvd`` (Keras) and ``train_torch_hvd`` (PyTorch). In Keras the
allreduce wait is measured inside the compiled training step: :func:`time_allreduce` wraps the
function through which Horovod's ``DistributedOptimizer`` (and ``DistributedGradientTape``) reduce the
gradients with two clocks, one read once every local gradient exists and one once every averaged
gradient does. A Keras callback cannot see that: it only sees whole steps. In PyTorch the step is
Python code: :class:`TorchSteps` times ``optimizer.synchronize()``, which ``optimizer.step()`` calls
after ``loss.backward()`` (whose hooks start the allreduces). Each trainer makes one call:
:func:`serve_for_keras` or :func:`serve_for_torch`.

Without ``--metrics-port`` nothing here runs: ``prometheus_client`` is not imported and nothing
is measured.
"""

from __future__ import annotations

import time

from hvdcourse.runtime.errors import UsageError

#: the four training metrics every rank serves (their names without the ``_sum``/``_count`` suffixes)
TRAINING_METRICS = (
    "hvdcourse_images_per_second",
    "hvdcourse_step_seconds",
    "hvdcourse_loss",
    "hvdcourse_allreduce_wait_seconds",
)


class RankMetrics:
    """The metrics of one rank and the HTTP server that serves them on ``port``.

    A registry of its own (not ``prometheus_client``'s global one) holds the course's metrics and the
    process collector (CPU seconds, memory of this process).
    """

    def __init__(self, port: int, rank: int, host: str = "0.0.0.0"):
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            ProcessCollector,
            start_http_server,
        )

        self.port, self.rank = port, rank
        self.registry = registry = CollectorRegistry()
        registry.register(WithRank(ProcessCollector(registry=None), rank))
        label = {"labelnames": ["rank"], "registry": registry}
        who = str(rank)
        self.images = Counter("hvdcourse_images", "images trained on", **label).labels(who)
        self.images_per_second = Gauge(
            "hvdcourse_images_per_second", "images/s of the last step", **label
        ).labels(who)
        self.step = Histogram(
            "hvdcourse_step_seconds", "wall time of each training step", **label
        ).labels(who)
        self.loss = Gauge(
            "hvdcourse_loss", "training loss reported after the last step", **label
        ).labels(who)
        self.allreduce_wait = Histogram(
            "hvdcourse_allreduce_wait_seconds",
            "per step: from this rank's last local gradient to the averaged gradients",
            **label,
        ).labels(who)
        try:
            self.server, self.thread = start_http_server(port, addr=host, registry=registry)
        except OSError as err:
            raise UsageError(
                f"rank {rank} cannot serve its metrics on port {port} ({err.strerror}); "
                "pass another --metrics-port (each rank uses BASE + its local rank)"
            ) from None

    def observe(
        self, images: int, seconds: float, loss: float | None, allreduce_wait: float | None
    ) -> None:
        """Record one training step."""
        self.images.inc(images)
        self.step.observe(seconds)
        if seconds > 0:
            self.images_per_second.set(images / seconds)
        if loss is not None:
            self.loss.set(loss)
        if allreduce_wait is not None:
            self.allreduce_wait.observe(allreduce_wait)

    def close(self) -> None:
        """Stop serving (the server thread is a daemon: a process that exits needs no call)."""
        self.server.shutdown()
        self.server.server_close()


class WithRank:
    """A collector that adds ``rank="<rank>"`` to every sample of ``inner`` (the process' CPU time
    and memory, which ``prometheus_client`` serves without labels), so that every series a rank
    serves can be grouped by rank."""

    def __init__(self, inner, rank: int):
        self.inner, self.rank = inner, str(rank)

    def collect(self):
        for family in self.inner.collect():
            family.samples = [
                sample._replace(labels={**sample.labels, "rank": self.rank})
                for sample in family.samples
            ]
            yield family


def serve(base_port: int, rank: int, local_rank: int) -> RankMetrics:
    """Start serving this rank's metrics on ``base_port + local_rank``: one port per rank of a node."""
    return RankMetrics(base_port + local_rank, rank)


def time_allreduce(distributed):
    """Measure, inside the training step, how long the gradients' allreduce holds the step up.

    ``distributed``: Horovod's ``DistributedOptimizer`` (Keras) or ``DistributedGradientTape``, before
    its first step is traced. Returns a ``tf.Variable`` holding the last step's seconds from "every
    local gradient is ready" to "every averaged gradient is back". It wraps the object's
    ``_allreduce_grads`` (the one function both send the gradients through, in Horovod 0.28.1).

    The two clocks are read by ``tf.py_function`` with the gradients (a sum of each) as inputs: a data
    dependency the runtime must respect. A ``tf.timestamp()`` under ``tf.control_dependencies`` is
    not enough: with Horovod's allreduce both timestamps ran as soon as the step began (measured: 0 s
    on a rank that waited 0.2 s per step for the other).
    """
    import tensorflow as tf

    reduce = getattr(distributed, "_allreduce_grads", None)
    if reduce is None:
        raise TypeError(
            f"{type(distributed).__name__} has no _allreduce_grads: pass Horovod's "
            "DistributedOptimizer or DistributedGradientTape"
        )
    seconds = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="allreduce_wait")

    def clock(tensors):
        """Now, in seconds, once every tensor of ``tensors`` exists."""
        sums = [tf.reduce_sum(t) for t in tensors if t is not None]
        return tf.py_function(lambda *_: time.perf_counter(), sums, tf.float64)

    def timed(grads, *args):
        start = clock(grads)  # this rank's gradients all exist
        reduced = reduce(grads, *args)
        seconds.assign(clock(reduced) - start)  # the averaged ones all do
        return reduced

    distributed._allreduce_grads = timed
    return seconds


class StepClock:
    """Records each training step into ``metrics``, as both trainers' hooks call it.

    A step lasts from the end of the previous step to the end of this one, so whatever the rank
    does between two steps (other callbacks, input) counts; the first step of an epoch starts at
    its own beginning (what runs between epochs, validation or a checkpoint, does not count).
    """

    def __init__(self, metrics: RankMetrics, batch_size: int):
        self.metrics, self.batch_size, self.since = metrics, batch_size, None

    def epoch_begins(self) -> None:
        self.since = None

    def step_begins(self) -> None:
        if self.since is None:
            self.since = time.perf_counter()

    def step_ends(self, loss: float | None, allreduce_wait: float | None) -> None:
        now = time.perf_counter()
        self.metrics.observe(self.batch_size, now - self.since, loss, allreduce_wait)
        self.since = now


def keras_callback(metrics: RankMetrics, batch_size: int, allreduce_seconds=None):
    """A Keras callback that records every training step into ``metrics`` (see :class:`StepClock`).

    ``allreduce_seconds``: the variable :func:`time_allreduce` returned (``None``: not measured).
    """
    import tensorflow as tf

    class LiveMetrics(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.clock = StepClock(metrics, batch_size)

        def on_epoch_begin(self, epoch, logs=None):
            self.clock.epoch_begins()

        def on_train_batch_begin(self, batch, logs=None):
            self.clock.step_begins()

        def on_train_batch_end(self, batch, logs=None):
            loss = (logs or {}).get("loss")
            wait = None if allreduce_seconds is None else float(allreduce_seconds.numpy())
            self.clock.step_ends(None if loss is None else float(loss), wait)

    return LiveMetrics()


def serve_for_keras(optimizer, base_port: int, rank: int, local_rank: int, batch_size: int):
    """Serve this rank's metrics on ``base_port + local_rank``; return the Keras callback that records them.

    ``optimizer``: Horovod's ``DistributedOptimizer``, before its first step, whose allreduce
    :func:`time_allreduce` times.
    """
    metrics = serve(base_port, rank, local_rank)
    return keras_callback(metrics, batch_size, time_allreduce(optimizer))


def serve_for_torch(
    optimizer,
    loss_fn,
    base_port: int,
    rank: int,
    local_rank: int,
    batch_size: int,
    steps_per_epoch: int,
):
    """Serve this rank's metrics on ``base_port + local_rank``; return the PyTorch trainers' callback
    that records them (:class:`TorchSteps`)."""
    return TorchSteps(
        serve(base_port, rank, local_rank), batch_size, steps_per_epoch, optimizer, loss_fn
    )


class TorchSteps(StepClock):
    """The PyTorch trainers' live metrics: a callback whose ``on_train_batch_begin``/``_end(step,
    model, optimizer)`` record every step (:class:`hvdcourse.examples.torch_training.CallbackOptimizer`
    calls them).

    The loop is left as it is: ``optimizer`` (Horovod's ``DistributedOptimizer``) gets a timed
    ``synchronize()``, which its ``step()`` calls to wait for the averaged gradients whose allreduces
    ``loss.backward()`` started (in its hooks); a forward hook on ``loss_fn`` reads each step's loss.
    ``steps_per_epoch``: the loop's steps per epoch (global step ``k * steps_per_epoch`` begins an
    epoch). The loss served is this rank's running mean over the epoch, as Keras reports it.
    """

    def __init__(
        self, metrics: RankMetrics, batch_size: int, steps_per_epoch: int, optimizer, loss_fn
    ):
        super().__init__(metrics, batch_size)
        self.steps_per_epoch = steps_per_epoch
        self.loss_sum, self.losses, self.wait, self.last_loss = 0.0, 0, None, None
        synchronize = optimizer.synchronize

        def timed_synchronize():
            start = time.perf_counter()
            done = synchronize()
            self.wait = time.perf_counter() - start
            return done

        optimizer.synchronize = timed_synchronize
        loss_fn.register_forward_hook(self.loss_computed)

    def loss_computed(self, loss_fn, inputs, loss) -> None:
        self.last_loss = loss.detach()

    def on_train_batch_begin(self, step, model, optimizer):
        if step % self.steps_per_epoch == 0:
            self.epoch_begins()
            self.loss_sum, self.losses = 0.0, 0
        self.step_begins()

    def on_train_batch_end(self, step, model, optimizer):
        if self.last_loss is not None:
            self.loss_sum += float(self.last_loss)
            self.losses += 1
            self.last_loss = None
        self.step_ends(self.loss_sum / self.losses if self.losses else None, self.wait)
