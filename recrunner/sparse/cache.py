"""Hot rows of one model version, kept in the server after their first read.

Sorted ids and their rows in two arrays, looked up for a whole batch with one searchsorted: a
dict would cost a Python call per id (thousands a batch). Rows are added until the cache holds
`capacity`; under CTR traffic's skew the rows read first are the frequent ones. A version's
rows never change, so a hit is always right; a new version starts with an empty cache.
"""

import threading

import numpy as np


class RowCache:
    def __init__(self, capacity: int, width: int) -> None:
        self.capacity = capacity
        # One tuple, replaced whole: a reader takes it once and never sees a half-made merge.
        self._data = (np.empty(0, np.int64), np.empty((0, width), np.float32))
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data[0])

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(hit mask, rows of the hits) for sorted unique `ids`."""
        keys, rows = self._data
        if not len(keys):
            self.misses += len(ids)
            return np.zeros(len(ids), bool), rows[:0]
        pos = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
        hit = keys[pos] == ids
        found = int(hit.sum())
        self.hits += found
        self.misses += len(ids) - found
        return hit, rows[pos[hit]]

    def add(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Keep rows of `ids` (not cached yet) while there is room."""
        if len(self) >= self.capacity or not len(ids):
            return
        with self._lock:
            keys, held = self._data
            room = self.capacity - len(keys)
            ids, rows = ids[:room], rows[:room]
            fresh = ~np.isin(ids, keys)  # another thread may have added them meanwhile
            merged = np.concatenate([keys, ids[fresh]])
            order = np.argsort(merged, kind="stable")
            self._data = (merged[order], np.concatenate([held, rows[fresh]])[order])
