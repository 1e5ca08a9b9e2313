"""Shared code of the course *Distributed Deep Learning with Horovod*."""

import os

# Before anything of the course imports TensorFlow: TensorFlow >= 2.16 makes tf.keras Keras 3 unless
# TF_USE_LEGACY_KERAS=1 is set first, and Horovod's Keras API needs Keras 2 (the tf-keras package).
# Launchers add the same setting to every process they start (hvdcourse.runtime.mpienv.launch_env).
KERAS_2_ENV = {"TF_USE_LEGACY_KERAS": "1"}
os.environ.update(KERAS_2_ENV)
