"""Data parallelism at scale, measured on 2 ranks with Horovod and Keras (lesson: Data parallelism at scale).

* :mod:`~hvdcourse.course.lessons.dp_scale.accumulation`: gradient accumulation with the
  ``DistributedOptimizer``'s ``backward_passes_per_step`` and ``average_aggregated_gradients``,
  checked against one step of a k times larger batch;
* :mod:`~hvdcourse.course.lessons.dp_scale.compression`: what ``hvd.Compression.fp16`` hands to the
  allreduce (bytes) and how long the allreduce of a model's gradients takes with and without it;
* :mod:`~hvdcourse.course.lessons.dp_scale.short_runs`: short trainings of the course's MNIST model, on one
  process or on Horovod's ranks, to measure compression, mixed precision (``mixed_bfloat16``) and
  the large-batch learning-rate rules (linear, square root, with warm-up);
* :mod:`~hvdcourse.course.lessons.dp_scale.check`: the command run on the ranks by the tests
  (``mpirun -np 2 python -m hvdcourse.course.lessons.dp_scale.check accumulation``).
"""
