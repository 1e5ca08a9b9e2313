"""hvdcourse.data: where MNIST comes from, and what happens with bad files."""
import numpy as np
import pytest

from hvdcourse import data


@pytest.fixture
def no_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(data, "KERAS_CACHE", str(tmp_path / "absent" / "mnist.npz"))


def write_npz(path, n_train=20, n_test=10, shape=(28, 28), **override):
    arrays = {"x_train": np.zeros((n_train, *shape), np.uint8), "y_train": np.arange(n_train) % 10,
              "x_test": np.zeros((n_test, *shape), np.uint8), "y_test": np.arange(n_test) % 10}
    arrays.update(override)
    np.savez(path, **arrays)
    return str(path)


def test_fallback_is_digits_resized_to_mnist_shape(no_cache, capsys):
    ds = data.load_mnist()
    assert ds.x_train.shape[1:] == (28, 28) and ds.x_train.dtype == np.uint8
    assert len(ds.x_train) + len(ds.x_test) == 1797
    assert set(np.unique(ds.y_train)) == set(range(10))
    assert "offline fallback" in ds.source


def test_fallback_prints_a_notice_naming_prepare_data(no_cache, capsys):
    data.load_mnist()
    assert "hvdcourse-prepare-data" in capsys.readouterr().err


def test_fallback_split_is_identical_on_every_call(no_cache):
    a, b = data.load_mnist(quiet=True), data.load_mnist(quiet=True)
    assert np.array_equal(a.y_test, b.y_test) and np.array_equal(a.x_train, b.x_train)


def test_explicit_npz_path_is_used(tmp_path):
    ds = data.load_mnist(write_npz(tmp_path / "m.npz"))
    assert len(ds.x_train) == 20 and ds.source.endswith("m.npz")


def test_cached_keras_file_is_preferred_to_fallback(monkeypatch, tmp_path):
    monkeypatch.setattr(data, "KERAS_CACHE", write_npz(tmp_path / "mnist.npz", n_train=30))
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
    assert data.prepare_main(["--out", str(tmp_path / "m.npz")]) == 1
    assert "login node" in capsys.readouterr().err


def test_prepare_data_accepts_an_existing_valid_file(tmp_path, capsys):
    assert data.prepare_main(["--out", write_npz(tmp_path / "m.npz")]) == 0
