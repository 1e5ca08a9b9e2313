"""The middle layer: what a learner reads, the course's data, model and training scripts.

The trainers (``train_single``, ``train_hvd``, ``train_tape``, ``train_elastic``, ``train_mwms``),
the model, the MNIST data, the training helpers and the scripts' shared command-line options.
Lessons show these files (``literalinclude``) and run them (``python -m hvdcourse.examples.train_hvd``),
so they stay short and free of course machinery. Modules here may import :mod:`hvdcourse.runtime`,
never :mod:`hvdcourse.course` (checked by ``tests/test_layers.py``).
"""
