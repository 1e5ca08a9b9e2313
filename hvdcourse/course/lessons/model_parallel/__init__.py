"""Model parallelism written by hand with NumPy and mpi4py (lesson: Model parallelism by hand).

Each module is small and runs on the CPU with 2 MPI ranks, so that a learner sees every number:

* :mod:`~hvdcourse.course.lessons.model_parallel.tensor_parallel`: a Megatron MLP block split column-wise
  then row-wise over the ranks, one allreduce in the forward pass and one in the backward pass;
* :mod:`~hvdcourse.course.lessons.model_parallel.pipeline`: a stack of layers cut into stages, one per rank,
  fed with micro-batches on the GPipe or the 1F1B schedule, and the bubble it leaves;
* :mod:`~hvdcourse.course.lessons.model_parallel.zero`: Adam's state sharded over the ranks (ZeRO stage 1)
  with a reduce-scatter and an allgather, against plain data parallelism;
* :mod:`~hvdcourse.course.lessons.model_parallel.memory`: what training a named model needs per device,
  and which parallelism makes it fit;
* :mod:`~hvdcourse.course.lessons.model_parallel.check`: the command run on the ranks by the tests
  (``mpirun -np 2 python -m hvdcourse.course.lessons.model_parallel.check tensor``).
"""
