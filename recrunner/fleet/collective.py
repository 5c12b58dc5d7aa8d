"""mode=collective: data-parallel dygraph training, one process per trainer (gloo on CPU,
NCCL on GPUs): the run driver and dygraph engine of mode=local over a CollectiveGroup."""

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from recrunner.config.schema import RootConfig
from recrunner.data.batch import Batch
from recrunner.data.reader import unshard
from recrunner.fleet.roles import Role, check_port_free
from recrunner.train.driver import RunDriver
from recrunner.train.dygraph import DygraphEngine
from recrunner.train.group import LocalGroup
from recrunner.train.reading import Reader
from recrunner.train.row_adam import sum_rows

log = logging.getLogger("recrunner.fleet")


class CollectiveGroup(LocalGroup):
    """Every rank of the default process group (dist.init_parallel_env must have run)."""

    # DataParallel all-reduces the parameters' gradients; the host-updated tables' rows are
    # merged by merge_rows below (their weights are kept out of DataParallel's all-reduce).
    host_tables = True

    def __init__(self) -> None:
        import paddle.distributed as dist

        self.dist = dist
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()

    def wrap(self, net):  # noqa: ANN001, ANN201 - a paddle.nn.Layer
        import paddle

        from recrunner.train.optim import host_table_layers

        # The tables the optimizer updates on the host get no gradient of their own: a trainable
        # parameter without one would hold back DataParallel's all-reduce of its bucket.
        for layer in host_table_layers(paddle, net):
            layer.weight.stop_gradient = True
        # Broadcasts rank 0's initial weights and all-reduces the dense gradients.
        return paddle.DataParallel(net)

    def merge_rows(self, rows: np.ndarray, grad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every rank's distinct rows of a table (each rank's own are distinct) and their
        gradients: gathered in rank order, a row's gradients summed in rank order, divided by
        the world as DataParallel averages (each rank's loss is its own batch's mean): what
        DataParallel's sparse all-gather and Paddle's merge of the rows give, bit for bit.
        Identical on every rank."""
        # One gather: each row's id rides in two float32 columns beside its gradient (a view
        # of its bytes, not a conversion).
        ids = np.ascontiguousarray(rows, np.int64).view(np.float32).reshape(-1, 2)
        parts = self._all_gather(np.concatenate([ids, np.asarray(grad, np.float32)], axis=1))
        every = [np.ascontiguousarray(p[:, :2]).view(np.int64).reshape(-1) for p in parts]
        distinct, merged = sum_rows(every, [p[:, 2:] for p in parts])
        merged /= np.float32(self.world)
        return distinct, merged

    def _all_gather(self, values: np.ndarray) -> list[np.ndarray]:
        import paddle

        values = np.ascontiguousarray(values)
        sizes: list[Any] = []
        self.dist.all_gather(sizes, paddle.to_tensor(np.array([len(values)], np.int64)))
        counts = [int(s.numpy()[0]) for s in sizes]
        # all_gather needs equal shapes: pad to the longest, trim after.
        padded = np.zeros((max(max(counts), 1), *values.shape[1:]), values.dtype)
        padded[: len(values)] = values
        parts: list[Any] = []
        self.dist.all_gather(parts, paddle.to_tensor(padded))
        return [p.numpy()[:n] for p, n in zip(parts, counts, strict=True)]

    def gather(self, values: np.ndarray) -> np.ndarray:
        return np.concatenate(self._all_gather(values))

    def gather_rows(self, values: np.ndarray, spec: str) -> np.ndarray:
        """Every rank's rows of `spec`, back in file order when shards are row strides."""
        return unshard(self._all_gather(values), spec)

    def barrier(self) -> None:
        self.dist.barrier()

    def sum(self, value: float) -> float:
        import paddle

        t = paddle.to_tensor(np.array([value], np.float64))
        self.dist.all_reduce(t)
        return float(t.numpy()[0])

    def max(self, value: float) -> float:
        import paddle

        t = paddle.to_tensor(np.array([value], np.float64))
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t.numpy()[0])

    def lockstep(self, batches: Iterator[Batch], size: int,
                 empty: Batch) -> Iterator[tuple[Batch, bool]]:
        """Every rank takes the same number of optimizer steps.

        DataParallel all-reduces every step, so a rank with one more batch than the others
        would wait forever. Ranks agree on each step; when one runs dry, the rows still left
        anywhere are gathered and every rank trains on the same batches (identical gradients,
        so the average is that batch's gradient): every row still trains once per epoch.
        """
        while True:
            batch = next(batches, None)
            every, some = self.all_have(batch is not None)
            if every:
                assert batch is not None  # every rank has one, this one too
                yield batch, False
                continue
            if not some:
                return
            # The tail: collect what is left on every rank, then train on it together.
            mine = [batch] if batch is not None else []
            mine += list(batches)
            rest = Batch.concat(mine) if mine else empty
            tail = Batch(self.gather(rest.dense), self.gather(rest.sparse),
                         self.gather(rest.label))
            log.info("rank %d: %d tail rows trained by every rank together", self.rank,
                     len(tail))
            for start in range(0, len(tail), size):
                yield tail.take(slice(start, start + size)), True
            return

    def all_have(self, flag: bool) -> tuple[bool, bool]:
        """(every rank has it, some rank has it)."""
        total = self.sum(1.0 if flag else 0.0)
        return total == self.world, total > 0


def params_digest(net: Any) -> str:
    """sha256 of every parameter: equal on all ranks when data parallelism is correct."""
    import hashlib

    h = hashlib.sha256()
    for name, value in sorted(net.state_dict().items()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(value.numpy()).tobytes())
    return h.hexdigest()


def run_collective(cfg: RootConfig, role: Role) -> dict[str, Any]:
    import os

    from recrunner.fleet.worker import StartupWatchdog, fail_status
    from recrunner.runtime import import_paddle

    paddle = import_paddle(cfg.runner.threads)
    if not paddle.is_compiled_with_cuda():
        os.environ.setdefault("PADDLE_DISTRI_BACKEND", "gloo")
    if role.index == 0 and not os.environ.get("PADDLE_MASTER"):
        # Without a launcher rank 0 hosts the rendezvous store on the first endpoint.
        check_port_free(role.trainers[0], "trainer 0 (rendezvous)")
    import paddle.distributed as dist

    watchdog = StartupWatchdog(cfg.mode.timeout_s, f"{role.name}: joining the "
                               f"{role.trainers_num} trainers ({','.join(role.trainers)})",
                               fail_status(cfg, role))
    dist.init_parallel_env()
    group = CollectiveGroup()
    group.barrier()
    watchdog.done.set()
    log.info("collective trainer %d of %d", group.rank, group.world)
    reader = Reader(cfg, group.shard)
    engine = DygraphEngine(cfg, group, reader)
    summary = RunDriver(cfg, engine, group, reader).run()
    digest = params_digest(engine.net)
    log.info("parameters sha256 %s", digest)
    return {**summary, "params_sha256": digest}
