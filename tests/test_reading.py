"""The reader's in-memory cache of parsed batches (dataset.cache_mib)."""

import shutil
from pathlib import Path
from types import GeneratorType

import numpy as np
import pytest

from recrunner.config.compose import load
from recrunner.data.errors import DataError
from recrunner.data.reader import Shard
from recrunner.train.reading import Reader
from tests.conftest import data_overrides


def reader(synth_data: dict[str, str], tmp_path: Path, *overrides: str,
           shard: Shard | None = None) -> tuple[Reader, str]:
    """A reader over a private copy of the synthetic train file (the tests delete it)."""
    path = tmp_path / "train.tsv"
    shutil.copy(synth_data["train"], path)
    cfg = load([*data_overrides(synth_data), *overrides])
    return Reader(cfg, shard or Shard()), str(path)


def same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x.dense, y.dense) and np.array_equal(x.sparse, y.sparse)
        and np.array_equal(x.label, y.label) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("shard", [Shard(), Shard(1, 3)])
def test_a_second_pass_is_the_first_from_memory(synth_data, tmp_path, shard) -> None:
    r, path = reader(synth_data, tmp_path, shard=shard)
    first = list(r.batches(path, 300))
    Path(path).unlink()  # the second pass must not read the file
    again = list(r.batches(path, 300))
    assert same(first, again) and sum(map(len, first)) > 0
    assert r.held == sum(b.nbytes for b in again)
    # The cache holds copies, not views of the parsed blocks (their memory is counted).
    assert all(b.sparse.base is None for b in r.cached[(path, 300)])


def test_a_pass_larger_than_the_budget_is_streamed_every_time(synth_data, tmp_path) -> None:
    r, path = reader(synth_data, tmp_path, "dataset.cache_mib=1")  # 20k rows: ~5 MiB
    list(r.batches(path, 300))
    assert not r.cached and r.held == 0 and (path, 300) in r.too_big  # not tried again
    Path(path).unlink()
    with pytest.raises(DataError, match="no data files"):
        list(r.batches(path, 300))


def test_an_unfinished_pass_is_not_kept(synth_data, tmp_path) -> None:
    r, path = reader(synth_data, tmp_path)
    batches = r.batches(path, 300)
    next(batches)
    assert isinstance(batches, GeneratorType)  # a first pass, being parsed
    batches.close()  # e.g. a run stopped mid-epoch
    assert not r.cached and r.held == 0
    assert same(list(r.batches(path, 300)), r.cached[(path, 300)])  # the next pass is kept


def test_cache_off_and_bad_budget(synth_data, tmp_path) -> None:
    r, path = reader(synth_data, tmp_path, "dataset.cache_mib=0")
    list(r.batches(path, 300))
    assert not r.cached
    with pytest.raises(Exception, match="cache_mib=-1 must be at least 0"):
        load([*data_overrides(synth_data), "dataset.cache_mib=-1"])
