"""The five documents the course is built from, and the one short name each goes by in the book and the code
(lesson: Distributed Deep Learning with Horovod).

Pages, docstrings and tests cite a document by its short name ("the Large-scale Computation guide
calls ``LearningRateWarmupCallback(lr=...)``"); the book's introduction lists them all with
:func:`table`. Where a document is wrong, the lessons quote it and say what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    name: str  # the short name pages use, after "the": "the ELKH Cloud slides"
    title: str  # as the document prints it
    by: str
    what: str  # kind of document, event or place, date


SOURCES = {
    "elkh_cloud": Source(
        name="ELKH Cloud slides",
        title="Distributed Deep Learning with Horovod",
        by="Attila Farkas (SZTAKI)",
        what="slides, EGI/ACOnet, 27 April 2023: the ELKH Cloud's Horovod reference architecture and its "
        "performance evaluation on 1-8 V100 nodes",
    ),
    "supercomputers": Source(
        name="Supercomputers talk",
        title="Large Scale Distributed Deep Learning on Supercomputers",
        by="Hicham Agueny (NRIS, University of Bergen)",
        what="slides of a talk, NLDL 2024 winter school (UiT The Arctic University of Norway): LUMI-G, "
        "the theory, the TensorFlow conversion, timelines, CPU-GPU binding",
    ),
    "large_scale": Source(
        name="Large-scale Computation guide",
        title="Distributed Training for Large-scale Computation",
        by="Hicham Agueny",
        what="written guide (repository HichamAgueny/DistributedDL-Horovod): theory, Horovod step by "
        "step, MNIST, installation with EasyBuild and EESSI, Slurm",
    ),
    "intro_horovod": Source(
        name="Introduction to Horovod slides",
        title="Introduction to Horovod",
        by="Pierrick Pochelu (University of Luxembourg)",
        what="slides and practical session of an HPC school: parallel SGD, the six steps for TensorFlow 2 "
        "and PyTorch, multi-node Slurm",
    ),
    "horovod_ray": Source(
        name="Horovod-and-Ray benchmark",
        title="Benchmarking Horovod and Ray for Distributed DNN training on GPU cluster",
        by="Shreeparna Dey and Roopkatha Banerjee",
        what="slides, 28 April 2022: Horovod and Ray Train on 1-2 GPUs",
    ),
}


def cite(key: str) -> str:
    """'Horovod-and-Ray benchmark: Shreeparna Dey and Roopkatha Banerjee, *Benchmarking Horovod and Ray ...*'."""
    source = SOURCES[key]
    return f"{source.name}: {source.by}, *{source.title}*"


def table():
    """The sources as a pandas frame for the book: short name, title, author, what it is."""
    import pandas as pd

    return pd.DataFrame(
        [
            {"cited as": f"the {s.name}", "title": s.title, "by": s.by, "what": s.what}
            for s in SOURCES.values()
        ]
    )
