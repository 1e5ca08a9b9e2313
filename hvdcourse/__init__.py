"""Shared code of the course *Distributed Deep Learning with Horovod*."""
