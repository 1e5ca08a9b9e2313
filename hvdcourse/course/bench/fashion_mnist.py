"""Fashion-MNIST offline, from Debian's ``dataset-fashion-mnist`` package (lesson: Horovod and Ray
Train, side by side).

The Horovod-and-Ray benchmark trains MobileNetV2 on Fashion-MNIST. Nothing is downloaded at run time:
Debian's package (``apt-get install dataset-fashion-mnist``, installed by ``make test``'s set-up)
ships the four original IDX files (60,000 training and 10,000 test images, 28x28 grey, labels 0-9)
in ``/usr/share/datasets/fashion-mnist``. :func:`prepare` writes the course's ``.npz`` (keys
``x_train``, ``y_train``, ``x_test``, ``y_test``, read by every trainer's ``--data``) with the first
8,000 training and 2,000 test images in the files' own order: as many as the course's offline MNIST,
so that both workloads run the same steps and evaluate on as many images.
"""

from __future__ import annotations

import gzip
import os

import numpy as np

from hvdcourse.examples.data import DataError, load_npz
from hvdcourse.runtime.paths import cache_dir

DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"
FILES = {
    "x_train": "train-images-idx3-ubyte.gz",
    "y_train": "train-labels-idx1-ubyte.gz",
    "x_test": "t10k-images-idx3-ubyte.gz",
    "y_test": "t10k-labels-idx1-ubyte.gz",
}
SIZES = {"train": 8000, "test": 2000}  # the course's offline MNIST's


def read_idx(path: str) -> np.ndarray:
    """An IDX file (gzip): magic 0x0000 0x08 NDIM, NDIM big-endian sizes, then uint8 values."""
    with gzip.open(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] != 0x08:
        raise DataError(f"{path} is not an IDX file of bytes; reinstall dataset-fashion-mnist.")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    values = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if values.size != int(np.prod(shape)):
        raise DataError(f"{path} holds {values.size} values, its header says {shape}.")
    return values.reshape(shape)


def load(folder: str = DEBIAN_DIR, sizes: dict = SIZES) -> dict:
    """The four arrays, cut to ``sizes``; a one-line error naming the package when it is missing."""
    missing = [name for name in FILES.values() if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise DataError(
            f"no Fashion-MNIST in {folder} ({missing[0]} is missing): install Debian's package "
            "with 'apt-get install dataset-fashion-mnist' (make test's set-up does)."
        )
    arrays = {key: read_idx(os.path.join(folder, name)) for key, name in FILES.items()}
    return {key: value[: sizes[key.split("_")[1]]] for key, value in arrays.items()}


def prepare(folder: str = DEBIAN_DIR, out: str | None = None) -> str:
    """Write the ``.npz`` once (into the course's cache unless ``out``) and return its path."""
    out = out or os.path.join(cache_dir(), "fashion-mnist-8000-2000.npz")
    if not os.path.isfile(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out + ".tmp", "wb") as fh:
            np.savez_compressed(fh, **load(folder))
        os.replace(out + ".tmp", out)
    load_npz(out)  # checked as the trainers will read it
    return out
