"""The measurements behind lesson 5: contiguous blocks, bytes held per loading strategy."""
import numpy as np
import pytest

from hvdcourse.conversion_lab import block, held_bytes, memory_study


@pytest.mark.parametrize("n,size", [(1437, 2), (1437, 7), (60_000, 7), (5, 8)])
def test_blocks_cover_every_item_once(n, size):
    parts = [np.arange(n)[block(n, r, size)] for r in range(size)]
    assert np.array_equal(np.concatenate(parts), np.arange(n))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_held_bytes_counts_the_array_kept_not_the_temporaries():
    def load():
        temporary = np.ones(1_000_000)  # 8 MB, freed on return
        return (temporary[:1000] * 2).astype(np.uint8)  # a 1000-byte copy survives

    held, kept = held_bytes(load)
    assert kept.nbytes == 1000
    assert 1000 <= held < 10_000


def test_a_rank_reading_its_own_file_holds_its_shard_not_the_whole_set(tmp_path):
    rows = {r["strategy"]: r for r in memory_study(rank=0, size=2, workdir=str(tmp_path), barrier=lambda: None)}
    whole = rows["(one uint8 copy of all training images)"]["bytes"]
    own = rows["own file per rank (uint8)"]["bytes"]
    assert own == pytest.approx(whole / 2, rel=0.01)
    assert rows["load all, then shard (train_hvd)"]["bytes"] > 4 * whole  # uint8 + float32 copies
