"""A run's view of its data: this process's shard of a file spec, parsed with the run's
preprocessing, bad rows counted in one place for the whole run, and the parsed batches kept
in memory (within dataset.cache_mib) for the next pass."""

from collections.abc import Callable, Hashable, Iterator
from typing import Any

import numpy as np

from recrunner.config.schema import RootConfig
from recrunner.data.batch import Batch
from recrunner.data.errors import RowErrors
from recrunner.data.lines import Share, shares
from recrunner.data.reader import (
    Shard,
    expand_paths,
    iter_examples,
    prefetch,
    rebatch,
    rows_shared,
)
from recrunner.train.build import dataset_schema


class Reader:
    def __init__(self, cfg: RootConfig, shard: Shard, keep: bool = True) -> None:
        """keep=False: never cache (a reader that makes a single pass, e.g. `recrun eval`)."""
        self.dataset = cfg.dataset
        self.shard = shard
        self.schema = dataset_schema(cfg)
        self.errors = RowErrors(str(cfg.dataset.on_error), cfg.dataset.max_logged_errors)
        self.cache_bytes = cfg.dataset.cache_mib << 20 if keep else 0
        self.cached: dict[Hashable, list[Any]] = {}
        self.held = 0  # bytes of batches cached or being kept (passes under way included)
        self.too_big: set[Hashable] = set()  # passes that did not fit: never kept

    def blocks(self, spec: str) -> Iterator[Batch]:
        """Parsed blocks of this process's shard of `spec`, in file order."""
        return iter_examples(self.dataset, spec, self.schema, self.errors, self.shard)

    def batches(self, spec: str, size: int) -> Iterator[Batch]:
        """Batches of `size` rows: parsed in a background thread, or, after a whole first pass
        that fit in dataset.cache_mib, the same batches again from memory: parsing shares the
        trainer's cores (W&D from memory: 6% more examples per CPU-second,
        docs/performance.md)."""
        cached = self.cached.get((spec, size))
        if cached is not None:
            return iter(cached)
        return self._keep((spec, size), prefetch(rebatch(self.blocks(spec), size)))

    def shares(self, spec: str, size: int, world: int, rank: int, skip: int = 0
               ) -> Iterator[Share]:
        """This rank's share of each global batch of `size` rows (elastic training), from
        batch `skip` on; parsed in a background thread, a whole pass kept as `batches` does."""
        key = ("shares", spec, size, world, rank)
        if not skip and (cached := self.cached.get(key)) is not None:
            return iter(cached)
        parsed = prefetch(shares(self.dataset, spec, self.schema, self.errors, size, world,
                                 rank, skip))
        # A pass resumed part-way is not a whole pass: nothing to keep.
        return parsed if skip else self._keep(key, parsed)

    def _keep(self, key: Hashable, batches: Iterator[Any]) -> Iterator[Any]:
        """`batches`, each also copied into the cache while the whole pass fits; the cache
        takes the pass only once it has been read to the end."""
        kept: list[Any] | None = None if key in self.too_big else []
        size = 0
        try:
            for batch in batches:
                if kept is not None:
                    if self.held + batch.nbytes > self.cache_bytes:
                        if self.cache_bytes:
                            self.too_big.add(key)  # stream this spec every time
                        self.held -= size
                        kept, size = None, 0
                    else:
                        # A copy: the parsed batch may be a view holding a whole block (or,
                        # sharded by rows, every process's rows).
                        kept.append(batch.copy())
                        size += batch.nbytes
                        self.held += batch.nbytes
                yield batch
        except BaseException:
            self.held -= size  # an unfinished pass is not kept
            raise
        if kept is not None:
            self.cached[key] = kept

    def estimate_rows(self, spec: str, sample_bytes: int = 1 << 16) -> int | None:
        """About how many rows of `spec` this process reads (from the files' sizes and the
        first file's bytes per line), for a progress total; None when it cannot tell."""
        import fsspec

        files = expand_paths(spec)
        by_rows = rows_shared(len(files), self.shard.count)
        mine = files if by_rows else files[self.shard.index::self.shard.count]
        try:
            if any(fsspec.utils.infer_compression(f) for f in mine):
                return None  # sizes of compressed files say little about rows
            fs, _ = fsspec.core.url_to_fs(mine[0])
            total = sum(fs.size(f) for f in mine)
            with fsspec.open(mine[0], "rb") as f:
                sample = f.read(sample_bytes)
        except (OSError, ValueError, IndexError):
            return None
        lines = sample.count(b"\n")
        if not lines:
            return None
        rows = total * lines / len(sample)
        if by_rows:
            rows /= self.shard.count
        return int(rows)

    def predict(self, spec: str, size: int, predict: Callable[[Batch], np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray]:
        """(labels, probabilities) of this process's shard of `spec`, in file order."""
        labels, probs = [], []
        for batch in self.batches(spec, size):
            probs.append(predict(batch))
            labels.append(batch.label)
        if not probs:
            return np.empty(0, np.float32), np.empty(0, np.float32)
        return np.concatenate(labels), np.concatenate(probs)
