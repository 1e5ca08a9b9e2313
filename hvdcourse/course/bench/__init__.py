"""Benchmarks of the course (lesson: Measuring performance).

``python -m hvdcourse.course.bench.suite --out book/data/bench`` (``make bench``) runs them all:

* :mod:`hvdcourse.course.bench.throughput` - images/s of one training configuration (plain Keras, Horovod,
  MultiWorkerMirroredStrategy), timed after warm-up between barriers, median of repeats;
* :mod:`hvdcourse.course.bench.torch_throughput` - the same for PyTorch: plain, with Horovod, with DDP;
* :mod:`hvdcourse.course.bench.allreduce` - allreduce bus bandwidth from 4 KB to 64 MB;
* :mod:`hvdcourse.course.bench.machine` - what the numbers were measured on, and its memory-copy bandwidth;
* :mod:`hvdcourse.course.bench.monitor` - CPU and memory sampled with psutil while a run trains;
* :mod:`hvdcourse.course.bench.results` - reading the JSON results back (the lesson's plots and tables).
"""
