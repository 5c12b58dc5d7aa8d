"""mode=collective: data-parallel dygraph training, one process per trainer (gloo on CPU,
NCCL on GPUs), through the same Trainer as mode=local with a CollectiveGroup."""

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np

from recrunner.config.schema import RootConfig
from recrunner.data.batch import Batch
from recrunner.data.reader import unshard
from recrunner.fleet.roles import Role, check_port_free
from recrunner.train.group import LocalGroup
from recrunner.train.loop import Trainer

log = logging.getLogger("recrunner.fleet")


class CollectiveGroup(LocalGroup):
    """Every rank of the default process group (dist.init_parallel_env must have run)."""

    def __init__(self) -> None:
        import paddle.distributed as dist

        self.dist = dist
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()

    def wrap(self, net):  # noqa: ANN001, ANN201 - a paddle.nn.Layer
        import paddle

        # Broadcasts rank 0's initial weights and all-reduces gradients (sparse ones too).
        return paddle.DataParallel(net)

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

    def all_have(self, flag: bool) -> tuple[bool, bool]:
        """(every rank has it, some rank has it)."""
        total = self.sum(1.0 if flag else 0.0)
        return total == self.world, total > 0


class CollectiveTrainer(Trainer):
    """Trainer whose ranks take the same number of optimizer steps.

    DataParallel all-reduces every step, so a rank with one more batch than the others would
    wait forever. Ranks agree on each step; when one runs dry, the rows still left anywhere are
    gathered and every rank trains on the same batches (identical gradients, so the average is
    that batch's gradient): every row still trains exactly once per epoch.
    """

    group: CollectiveGroup

    def __init__(self, cfg: RootConfig, group: CollectiveGroup) -> None:
        super().__init__(cfg, group)
        self.shared_examples = 0  # rows every rank trained on together (counted once)

    def batches(self, spec: str, size: int, shard: bool = True) -> Iterator[Batch]:
        inner = super().batches(spec, size, shard)
        if spec != self.cfg.dataset.train or not shard:
            return inner
        return self._lockstep(inner, size)

    def _lockstep(self, inner: Iterator[Batch], size: int) -> Iterator[Batch]:
        while True:
            batch = next(inner, None)
            every, some = self.group.all_have(batch is not None)
            if every:
                yield batch
                continue
            if not some:
                return
            # The tail: collect what is left on every rank, then train on it together.
            mine = [batch] if batch is not None else []
            mine += list(inner)
            rest = Batch.concat(mine) if mine else Batch.empty(self.pre.num_dense,
                                                                   self.pre.sparse_width)
            tail = Batch(self.group.gather(rest.dense), self.group.gather(rest.sparse),
                         self.group.gather(rest.label))
            log.info("rank %d: %d tail rows trained by every rank together", self.group.rank,
                     len(tail))
            for start in range(0, len(tail), size):
                part = tail.take(slice(start, start + size))
                self.shared_examples += len(part)
                yield part
            return

    def params_digest(self) -> str:
        """sha256 of every parameter: equal on all ranks when data parallelism is correct."""
        import hashlib

        h = hashlib.sha256()
        for name, value in sorted(self.net.state_dict().items()):
            h.update(name.encode())
            h.update(np.ascontiguousarray(value.numpy()).tobytes())
        return h.hexdigest()

    def train_epoch(self) -> None:
        # Keep train_examples a job-wide count (checkpoints and the summary report it): each
        # rank's own rows, the tail that all ranks shared counted once.
        progress = self.progress
        before, self.shared_examples = progress.train_examples, 0
        super().train_epoch()
        mine = progress.train_examples - before - self.shared_examples
        progress.train_examples = before + int(round(self.group.sum(mine))) + self.shared_examples


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
    trainer = CollectiveTrainer(cfg, group)
    summary = trainer.run()
    digest = trainer.params_digest()
    log.info("parameters sha256 %s", digest)
    return {**summary, "params_sha256": digest}
