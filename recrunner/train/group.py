"""How the training loop sees its process group: one process here, a fleet in mode=collective/ps."""

import numpy as np

from recrunner.data.reader import Shard


class LocalGroup:
    """A single process: it reads everything and writes everything.

    recrunner.fleet.collective.CollectiveGroup implements the same hooks over
    paddle.distributed (rank, world, DataParallel, all_gather, barrier, all_reduce).
    """

    rank = 0
    world = 1

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    @property
    def shard(self) -> Shard:
        return Shard(self.rank, self.world)

    def wrap(self, net):  # noqa: ANN001, ANN201 - a paddle.nn.Layer
        return net

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
