"""The middle layer: what a learner reads, the course's data, model and training scripts.

The trainers (``train_single``, ``train_hvd``, ``train_tape``, ``train_elastic``, ``train_mwms``),
the model, the MNIST data, the training helpers and the scripts' shared command-line options.
Lessons show these files (``literalinclude``) and run them (``python -m hvdcourse.examples.train_hvd``),
so they stay short and free of course machinery. Modules here may import :mod:`hvdcourse.runtime`,
never :mod:`hvdcourse.course` (checked by ``tests/project/test_layers.py``).

The trainers' contract (checked by ``tests/examples/test_trainer_contract.py``; PyTorch trainers
will keep it too):

* ``main(argv=None, callbacks=()) -> int``: ``argv`` as for argparse (``None``: ``sys.argv[1:]``);
  ``callbacks`` are extra Keras callbacks (a profiler, :mod:`hvdcourse.course.lessons.faults`' fault
  injection); 0 on success. No work at import time.
* Options from :func:`hvdcourse.examples.cli.training_parser`, with the same names everywhere
  (``--epochs --batch-size --lr --warmup-epochs --data --download --checkpoint-dir --no-resume
  --max-steps --seed --threads --metrics-json``); a trainer may add its own (``--workers``,
  ``--batches-per-commit``). ``train_elastic`` keeps its state in memory and has no checkpoint or
  warm-up options.
* The metrics record written by ``--metrics-json`` (rank 0 only) is
  :func:`hvdcourse.examples.training.report_final_metrics`' (also reported to the launcher):
  ``loss``, ``accuracy``, ``examples`` on the whole test set, ``workers``, ``weights_sha256``, plus
  trainer-specific keys after them. :func:`hvdcourse.examples.training.finish` makes, prints and
  writes it in one call.
* Checkpoints are :class:`hvdcourse.examples.training.EpochCheckpoint`, restored by ONE function,
  :func:`hvdcourse.examples.training.resume_from_checkpoint` (rank 0 reads, the epoch or the error
  and then the weights and optimizer state are broadcast before the first step).
* Errors: library code raises :class:`hvdcourse.runtime.errors.CourseError` subclasses (``DataError``,
  ``CheckpointError``, ``UsageError``), never ``sys.exit``; the script ends with
  ``sys.exit(run_trainer(main))`` (:func:`hvdcourse.examples.cli.run_trainer`), which prints
  ``hvdcourse: error: ...`` once with exit code 2, or ``[hvdcourse] rank N failed: ...`` and the
  traceback for a crash.
* Horovod's canonical order (init, pin the device, data, model, scale the learning rate,
  DistributedOptimizer, callbacks, rank-0 checkpoints and logs) and a whole ``# Horovod:`` sentence
  above every distributed line: the lessons show these files.
"""
