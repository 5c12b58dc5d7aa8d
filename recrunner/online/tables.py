"""The tables between passes, as each engine holds them: which rows a pass changed, and how
rows are evicted (model.evict_after_passes).

- mode=local (`DygraphTables`): the tables are this process's tensors. The rows a pass
  changed are those that differ from the tables it started with (the tables' Adam is lazy:
  exactly the rows its batches looked up); eviction zeroes rows and their Adam moments.
- mode=ps (`PsTables`): the tables live on the servers, and Paddle's sparse accessor keeps
  each row's statistics. The rows a pass changed are the servers' own delta (save mode 1:
  rows pushed since the last delta save); eviction is the servers' shrink, which deletes the
  rows unseen for more than `delete_after_unseen_days` saves of mode 3 (recrunner.fleet.
  ps_tables). The driver predicts the same rows from its `seen` record, and the version
  written after the pass checks that the servers deleted exactly those.

Every process of the job calls these methods (the PS saves and shrink are collective); only
the writer's results are used.
"""

from typing import Any, Protocol

import numpy as np

from recrunner.online import versions


class PassTables(Protocol):
    # Whether versions take their delta rows from `changed` (else from comparing tables).
    exact_delta: bool

    def begin(self, previous: versions.Arrays | None) -> None:
        """Before the pass trains: `previous` holds the tables it starts from, if known."""

    def changed(self) -> np.ndarray:
        """After the pass trained: the rows it changed (writer; others may get none)."""

    def evict(self, rows: np.ndarray) -> None:
        """Delete `rows` (what the driver's record says is unseen for long enough)."""


class DygraphTables:
    exact_delta = False  # the version compares the tables themselves

    def __init__(self, engine: Any, table_rows: int) -> None:
        self.engine, self.table_rows = engine, table_rows
        self.before: versions.Arrays | None = None

    def now(self) -> versions.Arrays:
        state = {k: np.asarray(v) for k, v in self.engine.net.state_dict().items()}
        return versions.split(state, self.table_rows)[0]

    def begin(self, previous: versions.Arrays | None) -> None:
        self.before = previous if previous is not None else self.now()

    def changed(self) -> np.ndarray:
        assert self.before is not None, "begin() first"
        return versions.changed_rows(self.now(), self.before)

    def evict(self, rows: np.ndarray) -> None:
        if len(rows):
            self.engine.zero_table_rows(rows, self.table_rows)


class PsTables:
    exact_delta = True  # the servers' delta, plus the rows their shrink deleted

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def begin(self, previous: versions.Arrays | None) -> None:
        pass  # the servers track it

    def changed(self) -> np.ndarray:
        return np.asarray(self.engine.saved_delta_rows(), np.int64)

    def evict(self, rows: np.ndarray) -> None:
        self.engine.shrink()  # the servers decide; write_version checks they agreed


def for_engine(engine: Any, table_rows: int) -> PassTables:
    from recrunner.train.dygraph import DygraphEngine

    if isinstance(engine, DygraphEngine):
        return DygraphTables(engine, table_rows)
    return PsTables(engine)
