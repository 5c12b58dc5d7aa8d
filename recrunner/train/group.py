"""The process group a run trains in: this one process (mode=local); the data-parallel ranks
(recrunner.fleet.collective.CollectiveGroup) and the parameter-server trainers
(recrunner.fleet.ps.PsTrainerGroup) implement the same hooks."""

from collections.abc import Iterator
from typing import Any

import numpy as np

from recrunner.data.batch import Batch
from recrunner.data.reader import Shard


class LocalGroup:
    """A single process: it reads everything and writes everything."""

    rank = 0
    world = 1
    # The tables may be updated on the host (recrunner.train.row_adam): their gradients are
    # the rows' own, not parameters' gradients that an all-reduce must see.
    host_tables = True
    # How ranks combine the host-updated tables' rows (row_adam.MergeRows): alone, no need.
    merge_rows: Any = None

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    @property
    def shard(self) -> Shard:
        return Shard(self.rank, self.world)

    def wrap(self, net: Any) -> Any:
        """The network as this group trains it (DataParallel in a collective group)."""
        return net

    def lockstep(self, batches: Iterator[Batch], size: int,
                 empty: Batch) -> Iterator[tuple[Batch, bool]]:
        """(batch, trained by every rank together): ranks that step together (collective)
        must take the same number of steps. `empty`: a batch of no rows of this data."""
        return ((batch, False) for batch in batches)

    def gather(self, values: np.ndarray) -> np.ndarray:
        """Concatenate every rank's array (rank order)."""
        return values

    def gather_rows(self, values: np.ndarray, spec: str) -> np.ndarray:
        """Every rank's per-row values of the data `spec` (read through `shard`), merged back
        into the files' row order where the sharding allows it (so they line up with
        per-row side files such as the synthetic data's truth)."""
        return values

    def barrier(self) -> None:
        pass

    def sum(self, value: float) -> float:
        return value

    def max(self, value: float) -> float:
        return value
