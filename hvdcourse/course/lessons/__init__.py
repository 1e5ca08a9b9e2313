"""Lesson code: what the lessons run and show, one idea per module.

Each module serves one lesson (named in its docstring) and may import the runtime and the
examples layers, never the course's commands or services.

* :mod:`~hvdcourse.course.lessons.bandwidth`: Allreduce bandwidth between the ranks of a job, as
  NCCL's tests report it: ``hvdcourse-check --allreduce-bandwidth`` (lesson: Parameter servers and
  ring-allreduce).
* :mod:`~hvdcourse.course.lessons.checkpoint_order`: Which epoch does rank 0's
  ``ModelCheckpoint(save_best_only=True)`` keep, placed before or after ``MetricAverageCallback``?
  (lesson: Converting a Keras MNIST script to Horovod).
* :mod:`~hvdcourse.course.lessons.conversion_lab`: Learning-rate scaling and warm-up, metric
  averaging, and how much of the data set each rank holds in memory, measured (lesson: Converting a
  Keras MNIST script to Horovod).
* :mod:`~hvdcourse.course.lessons.conversion_record`: The full learning-rate lab of "Converting to
  Horovod: going further", run once and recorded.
* :mod:`~hvdcourse.course.lessons.dp_scale`: Data parallelism at scale, measured on 2 ranks with
  Horovod and Keras (lesson: Data parallelism at scale).
* :mod:`~hvdcourse.course.lessons.eb_lmod`: EasyBuild and Lmod run on this machine: recipes, a dry
  run and a module file for the course's venv (lesson: Installing Horovod).
* :mod:`~hvdcourse.course.lessons.fault_compare`: One worker killed, three ways: plain Horovod,
  Horovod Elastic and Ray Train side by side (lesson: Horovod and Ray Train, side by side).
* :mod:`~hvdcourse.course.lessons.faults`: Inject a fault into one rank of a training run (lesson:
  Faults, hangs and elastic training).
* :mod:`~hvdcourse.course.lessons.framework_compare`: Keras + Horovod, PyTorch + Horovod and PyTorch
  DDP on one problem, at 1 and N ranks (lessons: PyTorch with Horovod, and DDP; Horovod and Ray
  Train, side by side).
* :mod:`~hvdcourse.course.lessons.gradients`: Why data parallelism is exact: averaged shard
  gradients = the full-batch gradient (lesson: Parallelism schemes).
* :mod:`~hvdcourse.course.lessons.hardware`: Accelerators, nodes and what a model needs from them
  (lesson: Why distributed training).
* :mod:`~hvdcourse.course.lessons.model_parallel`: Model parallelism written by hand with NumPy and
  mpi4py (lesson: Model parallelism by hand).
* :mod:`~hvdcourse.course.lessons.output`: What a lesson page prints of a run or a command: ``show``
  and ``sh``, imported by the pages' setup cells.
* :mod:`~hvdcourse.course.lessons.parameter_server`: A parameter-server step written with mpi4py,
  and asynchronous SGD with stale gradients, simulated (lesson: Parameter servers and
  ring-allreduce).
* :mod:`~hvdcourse.course.lessons.ring`: Ring-allreduce written with mpi4py, and the alpha-beta cost
  of allreduce algorithms (lesson: Parameter servers and ring-allreduce).
* :mod:`~hvdcourse.course.lessons.ring_figure`: The ring allreduce step by step, drawn from
  :func:`hvdcourse.course.lessons.ring.ring_trace` (lesson: Parameter servers and ring-allreduce).
* :mod:`~hvdcourse.course.lessons.sources`: The five documents the course is built from, and the one
  short name each goes by in the book and the code (lesson: Distributed Deep Learning with Horovod).
* :mod:`~hvdcourse.course.lessons.timeline`: Record and read Horovod timelines (lesson: Profiling
  with the Horovod timeline).
* :mod:`~hvdcourse.course.lessons.torch_gradients`: Horovod's averaged PyTorch gradient is the
  full-batch gradient (lesson: PyTorch with Horovod, and DDP).
"""
