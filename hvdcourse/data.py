"""MNIST for the course, online or offline (lesson: Hands-on conversion).

Where the data comes from, in order:

1. an explicit ``.npz`` path (``--data``): used as is, or a clear error if it is missing or malformed;
2. Keras' cache (``~/.keras/datasets/mnist.npz``), or a download when the machine is online;
3. otherwise scikit-learn's bundled handwritten digits (1,797 real 8x8 scans) resized to 28x28,
   with a printed notice, so that every lesson also runs offline.

Compute nodes are often offline: run ``hvdcourse-prepare-data`` on a login node once, then pass
``--data`` (or rely on the cache, which lives in the home directory shared with compute nodes).
"""
from __future__ import annotations

import argparse
import os
import sys
import zipfile
from dataclasses import dataclass

import numpy as np

KERAS_CACHE = os.path.join(os.path.expanduser("~"), ".keras", "datasets", "mnist.npz")
KEYS = ("x_train", "y_train", "x_test", "y_test")
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"


class DataError(RuntimeError):
    """A data file exists but cannot be used; the message says what to do."""


@dataclass
class Dataset:
    """Train/test arrays (uint8 images of shape (n, 28, 28), int labels 0-9) and where they came from."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str

    def __repr__(self) -> str:
        return (f"Dataset(source={self.source!r}, train={len(self.x_train)}, test={len(self.x_test)})")


def load_npz(path: str) -> Dataset:
    """Load and validate an MNIST-style ``.npz`` (keys x_train, y_train, x_test, y_test)."""
    if not os.path.isfile(path):
        raise DataError(f"data file {path!r} does not exist. Run 'hvdcourse-prepare-data --out {path}' "
                        "on a machine with internet, or omit --data to use the offline fallback.")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in KEYS if k not in npz.files]
            if missing:
                raise DataError(f"data file {path!r} lacks the arrays {missing}; an MNIST .npz has "
                                f"{list(KEYS)}. Recreate it with 'hvdcourse-prepare-data --out {path}'.")
            arrays = {k: npz[k] for k in KEYS}
    except DataError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise DataError(f"data file {path!r} is corrupt or not an .npz ({type(err).__name__}: {err}). "
                        f"Delete it and run 'hvdcourse-prepare-data --out {path}' again.") from None
    _validate(arrays, path)
    return Dataset(*(arrays[k] for k in KEYS), source=path)


def _validate(arrays: dict, origin: str) -> None:
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != 3 or x.shape[1:] != IMAGE_SHAPE:
            raise DataError(f"{origin}: x_{split} has shape {x.shape}, expected (n, 28, 28) images. "
                            "Is this really MNIST? Recreate it with 'hvdcourse-prepare-data'.")
        if y.shape != (len(x),):
            raise DataError(f"{origin}: y_{split} has shape {y.shape} but there are {len(x)} images.")
        if len(y) and (y.min() < 0 or y.max() >= NUM_CLASSES):
            raise DataError(f"{origin}: y_{split} holds labels outside 0-9.")


def digits_as_mnist(test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """scikit-learn's bundled 8x8 digits, upscaled to 28x28 uint8 like MNIST (works offline)."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = zoom(digits.images, (1, 28 / 8, 28 / 8), order=1)  # 8x8 -> 28x28, bilinear
    images = np.clip(images * (255.0 / 16.0), 0, 255).astype(np.uint8)
    labels = digits.target.astype(np.uint8)
    order = np.random.default_rng(seed).permutation(len(labels))  # fixed split, same on every rank
    n_test = int(round(len(labels) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    return Dataset(images[train], labels[train], images[test], labels[test],
                   source="sklearn-digits-28x28 (offline fallback)")


def download_mnist(dest: str = KERAS_CACHE) -> str:
    """Download MNIST into ``dest`` through Keras (needs internet); return the path."""
    import tensorflow as tf

    # an absolute fname makes get_file write exactly there
    path = tf.keras.utils.get_file(os.path.abspath(dest), origin=MNIST_URL)
    load_npz(path)  # validate what arrived
    return path


def load_mnist(path: str | None = None, download: bool = False, quiet: bool = False) -> Dataset:
    """Load MNIST following the order in the module docstring.

    ``download=True`` tries the internet when nothing is cached (do it on one process only, e.g.
    with ``hvdcourse-prepare-data``, never from every rank at once).
    """
    if path:
        return load_npz(path)
    if os.path.isfile(KERAS_CACHE):
        return load_npz(KERAS_CACHE)
    if download:
        try:
            return load_npz(download_mnist())
        except Exception as err:  # offline: fall through to the bundled digits
            reason = f"download failed ({type(err).__name__})"
    else:
        reason = "MNIST is not cached"
    data = digits_as_mnist()
    if not quiet:
        print(f"[hvdcourse.data] NOTICE: {reason}; using scikit-learn's bundled digits resized to 28x28 "
              f"({len(data.x_train)} train / {len(data.x_test)} test images). For real MNIST run "
              "'hvdcourse-prepare-data' on a machine with internet.", file=sys.stderr)
    return data


def shard(x: np.ndarray, rank: int, size: int) -> np.ndarray:
    """Rank ``rank``'s part of ``x`` out of ``size`` disjoint parts that together cover ``x``.

    Strided (``x[rank::size]``) so the parts differ in length by at most one element.
    """
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is outside 0..{size - 1}")
    return x[rank::size]


def to_model_inputs(x: np.ndarray, y: np.ndarray):
    """uint8 images -> float32 in [0, 1] with a channel axis; labels -> int32."""
    return (x.astype(np.float32) / 255.0)[..., None], y.astype(np.int32)


def prepare_main(argv=None) -> int:
    """hvdcourse-prepare-data: fetch MNIST once on a login node (with internet) for offline compute nodes."""
    parser = argparse.ArgumentParser(prog="hvdcourse-prepare-data", description=prepare_main.__doc__)
    parser.add_argument("--out", default=KERAS_CACHE, help=f"where to write mnist.npz (default {KERAS_CACHE})")
    args = parser.parse_args(argv)
    try:
        if os.path.isfile(args.out):
            data = load_npz(args.out)
            print(f"{args.out}: already present and valid ({len(data.x_train)} train images)")
            return 0
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        path = download_mnist(os.path.abspath(args.out))
    except DataError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        print(f"error: could not download MNIST ({type(err).__name__}: {err}). This machine seems offline: "
              "run the command on a login node with internet, or copy mnist.npz here and pass --data.",
              file=sys.stderr)
        return 1
    print(f"MNIST saved to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(prepare_main())
