"""Benchmarks of the course (lesson: Measuring performance).

``python -m hvdcourse.course.bench.suite --out book/data/bench`` (``make bench``) runs them all:

* :mod:`hvdcourse.course.bench.throughput` - images/s of one training configuration (plain Keras, Horovod,
  MultiWorkerMirroredStrategy), timed after warm-up between barriers, median of repeats;
* :mod:`hvdcourse.course.bench.torch_throughput` - the same for PyTorch: plain, with Horovod, with DDP;
* :mod:`hvdcourse.course.bench.allreduce` - allreduce bus bandwidth from 4 KB to 64 MB;
* :mod:`hvdcourse.course.bench.ps_ring` - a parameter-server step, the course's ring and
  ``hvd.allreduce`` timed on 2-4 ranks, with the alpha-beta model fitted to them;
* what the numbers were measured on, and its memory-copy bandwidth, comes from
  :mod:`hvdcourse.runtime.machine` (shared with the grader, the book and the lessons);
* :mod:`hvdcourse.course.bench.monitor` - CPU and memory sampled with psutil while a run trains;
* :mod:`hvdcourse.course.bench.results` - reading the JSON results back (the lesson's plots and tables).

Also:

* :mod:`~hvdcourse.course.bench.fashion_mnist`: Fashion-MNIST offline, from Debian's
  ``dataset-fashion-mnist`` package (lesson: Horovod and Ray Train, side by side).
* :mod:`~hvdcourse.course.bench.grading_throughput`: How fast the grader grades: runs of
  ``hvdcourse-grade`` measured and recorded (lesson: Instructor guide).
* :mod:`~hvdcourse.course.bench.plots`: Plots of the benchmark results (lesson: Measuring
  performance).
* :mod:`~hvdcourse.course.bench.published`: Published benchmark figures the course discusses,
  transcribed as data (lesson: Measuring performance).
* :mod:`~hvdcourse.course.bench.side_by_side`: Horovod, the framework's own strategy and Ray Train
  on one problem: the source benchmark's three tables rerun (lesson: Horovod and Ray Train, side by
  side).
* :mod:`~hvdcourse.course.bench.slurm_scaling`: The ELKH Cloud talk's methodology (images/s and
  scaling efficiency at batch 32 and 196) on the local Slurm cluster's 1 and 2 nodes (lesson:
  Measuring performance: going further).
* :mod:`~hvdcourse.course.bench.source_models`: The Horovod-and-Ray benchmark rerun with its own
  models, ResNet-50 and MobileNetV2 (lesson: Horovod and Ray Train, side by side).
* :mod:`~hvdcourse.course.bench.suite`: The course's benchmark suite, one command (``make bench``;
  lesson: Measuring performance).
"""
