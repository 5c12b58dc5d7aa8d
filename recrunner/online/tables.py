"""The tables between passes, as each engine holds them: which rows a pass changed, how rows
are evicted (model.evict_after_passes), and the model's rows for its version.

- mode=local (`DygraphTables`): the tables are this process's tensors. The rows a pass
  changed are those that differ from the tables it started with (the tables' Adam is lazy:
  exactly the rows its batches looked up); eviction zeroes rows and their Adam moments.
- mode=ps (`PsTables`): the tables live on the servers, and Paddle's sparse accessor keeps
  each row's statistics. The rows a pass changed are the servers' own delta (save mode 1:
  rows pushed since the last delta save); eviction is the servers' shrink, which deletes the
  rows unseen for more than `delete_after_unseen_days` saves of mode 3 (recrunner.fleet.
  ps_tables). The driver predicts the same rows from its `seen` record, and the version
  written after the pass checks that the servers deleted exactly those. The version's rows
  are read from the servers' files saved with the pass's checkpoint, a block at a time
  (recrunner.fleet.ps_saved): no trainer holds the table.

Every process of the job calls these methods (the PS saves and shrink are collective); only
the writer's results are used.
"""

from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from recrunner.online import versions
from recrunner.train.checkpoint import Checkpoint

# The model's rows for a version: (dense parameters, each table's shape, the tables' blocks).
Saved = tuple[versions.Arrays, dict[str, list[int]], Iterator[versions.Block]]


class PassTables(Protocol):
    def begin(self) -> None:
        """Before the pass trains."""

    def changed(self) -> np.ndarray:
        """After the pass trained: the rows it changed (writer; others may get none)."""

    def live_now(self, changed: np.ndarray, before: Callable[[], np.ndarray]) -> np.ndarray:
        """After the pass trained: the live rows (`before()`: version n-1's)."""

    def evict(self, rows: np.ndarray) -> None:
        """Delete `rows` (what the driver's record says is unseen for long enough)."""

    def saved(self, ckpt: Checkpoint, state: versions.Arrays) -> Saved:
        """The model of checkpoint `ckpt` (`state`: its model.pdparams)."""


class DygraphTables:
    def __init__(self, engine: Any, table_rows: int) -> None:
        self.engine, self.table_rows = engine, table_rows
        self.before: versions.Arrays | None = None

    def now(self) -> versions.Arrays:
        state = {k: np.array(v.numpy()) for k, v in self.engine.net.state_dict().items()}
        return versions.split(state, self.table_rows)[0]

    def begin(self) -> None:
        self.before = self.now()

    def changed(self) -> np.ndarray:
        assert self.before is not None, "begin() first"
        rows = versions.changed_rows(self.now(), self.before)
        self.before = None
        return rows

    def live_now(self, changed: np.ndarray, before: Callable[[], np.ndarray]) -> np.ndarray:
        return versions.live_rows(self.now())

    def evict(self, rows: np.ndarray) -> None:
        if len(rows):
            self.engine.zero_table_rows(rows, self.table_rows)

    def saved(self, ckpt: Checkpoint, state: versions.Arrays) -> Saved:
        tables, dense = versions.split(state, self.table_rows)
        return dense, {k: list(v.shape) for k, v in tables.items()}, \
            versions.array_blocks(tables)


class PsTables:
    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def begin(self) -> None:
        pass  # the servers track it

    def changed(self) -> np.ndarray:
        return np.asarray(self.engine.saved_delta_rows(), np.int64)

    def live_now(self, changed: np.ndarray, before: Callable[[], np.ndarray]) -> np.ndarray:
        alive = before().copy()  # the rows on the servers: version n-1's and the new ones
        alive[changed] = True
        return alive

    def evict(self, rows: np.ndarray) -> None:
        self.engine.shrink()  # the servers decide; the version checks they agreed

    def saved(self, ckpt: Checkpoint, state: versions.Arrays) -> Saved:
        from recrunner.fleet import ps_saved
        from recrunner.fleet.geo import TABLE_KEY
        from recrunner.fleet.ps import TABLE_ID, ps_tables_dir

        rows, width = self.engine.table_shape()
        files = ps_tables_dir(ckpt) / f"{TABLE_ID:03d}"
        blocks = ((ids, {TABLE_KEY: values}) for ids, values in ps_saved.blocks(files, width))
        dense = {k: v for k, v in state.items() if k != TABLE_KEY}
        return dense, {TABLE_KEY: [rows, width]}, blocks


def for_engine(engine: Any, table_rows: int) -> PassTables:
    from recrunner.train.dygraph import DygraphEngine

    if isinstance(engine, DygraphEngine):
        return DygraphTables(engine, table_rows)
    return PsTables(engine)
