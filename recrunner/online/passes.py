"""`runner.online=true`: one pass per partition of dataset.train, each continuing from the
last pass's model and optimizer state (a pass is an epoch of the run driver: its checkpoint is
`checkpoints/<pass>`, so a killed run resumes at the next pass).

Before a pass trains on its partition, the model is scored on it: progressive validation, the
online CTR systems' measure (a `"trigger": "progressive"` line in metrics.jsonl, with `pass`
and `partition`). After it, dataset.test is scored (`"trigger": "pass"`), the checkpoint
written, the model version `versions/<pass>/` (recrunner.online.versions) and the export
refreshed, so `recrun serve`, `eval` and `predict` see the newest model.

`runner.follow=true` then waits for new partitions (complete ones: `_SUCCESS`), polling every
`runner.follow_interval_s`, until SIGTERM or SIGINT, which stop it after the pass in progress.
"""

import logging
import signal
import threading
from typing import Any

import numpy as np

from recrunner.config.schema import RootConfig
from recrunner.errors import Interrupted, RecrunnerError
from recrunner.online import evict, partitions, tables, versions
from recrunner.train import checkpoint
from recrunner.train.driver import RunDriver

log = logging.getLogger("recrunner.train")


class OnlineDriver(RunDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = self.cfg.dataset.train  # the glob; cfg.dataset.train is each pass's own
        self.stop = threading.Event()
        self.rows = int(self.cfg.model.sparse_feature_number)
        self.tables = tables.for_engine(self.engine, self.rows)
        self.live: tuple[int, np.ndarray] | None = None  # (version, its live rows)
        self.seen: np.ndarray | None = None  # each table row's last pass seen (eviction)
        self.changed: np.ndarray | None = None  # the pass's changed rows, for its delta
        self.expected_live: int | None = None  # the live rows eviction leaves

    # --- one pass ------------------------------------------------------------------------
    def train_pass(self, part: str) -> dict[str, Any]:
        n = self.progress.epoch + 1
        where = {"pass": n, "partition": part}
        self.record({**self.evaluate(part), **where}, trigger="progressive")
        self.cfg.dataset.train = part  # what the engine reads
        self.tables.begin()
        self.train_epoch()
        self.changed = self.tables.changed()
        if self.evict_after:
            where.update(self.evict(n, self.changed))
        metrics = {**self.evaluate(), **where}
        self.progress.improved(metrics["auc"])
        self.record(metrics, trigger="pass")
        self.save_checkpoint()
        if self.group.is_writer:
            self.write_version(n, metrics)
        return metrics

    def live_before(self, n: int) -> np.ndarray | None:
        """Version n-1's live rows: kept since it was written, or read back (a resumed run);
        None without a version n-1."""
        if self.live is not None and self.live[0] == n - 1:
            return self.live[1]
        if n > 1 and n - 1 in versions.existing(self.out):
            self.live = n - 1, versions.live_mask(self.out, n - 1)
            return self.live[1]
        return None

    # --- table hygiene (model.evict_after_passes) ------------------------------------------
    @property
    def evict_after(self) -> int:
        return int(getattr(self.cfg.model, "evict_after_passes", 0))

    def evict(self, n: int, changed: np.ndarray) -> dict[str, int]:
        """After pass n: mark the rows it changed as seen, evict those unseen for
        evict_after_passes passes; returns the counts for the pass's metrics line."""
        gone = np.empty(0, np.int64)
        live = 0
        if self.group.is_writer:
            if self.seen is None:
                done = n - 1  # passes before this one (a resumed run)
                kept = versions.load_extra(self.out, done, evict.SEEN) if done else None
                self.seen = kept if kept is not None else np.zeros(self.rows, np.int32)
            self.seen[changed] = n

            def before() -> np.ndarray:
                found = self.live_before(n)
                return found if found is not None else np.zeros(self.rows, bool)

            alive = self.tables.live_now(changed, before)
            gone = evict.to_evict(self.seen, n, self.evict_after, alive)
            live = int(alive.sum()) - len(gone)
            self.expected_live = live
            log.info("pass %d: %d table rows evicted (unseen for %d passes), %d live", n,
                     len(gone), self.evict_after, live)
        self.tables.evict(gone)
        return {"rows_evicted": int(len(gone)), "table_rows_live": live}

    def write_version(self, n: int, metrics: dict[str, Any]) -> None:
        cfg = self.cfg.runner
        # The export first: the version's served graph is converted from it.
        self.exported_epoch = n
        export_dir = self.out / "export"
        ckpt = checkpoint.at_epoch(self.out, n)
        self.engine.export(export_dir, {"metrics": metrics, **self.export_extra(),
                                        "trained_by": f"mode={self.cfg.mode.name}"}, ckpt)
        state = {k: np.asarray(v) for k, v in checkpoint.load(ckpt)[0].items()}
        dense, shapes, blocks = self.tables.saved(ckpt, state)
        del state
        before = self.live_before(n)
        # A delta needs version n-1 and the pass's changes (unknown to a run resumed between
        # a pass's checkpoint and its version: a base then).
        base = versions.is_base(n, cfg.base_every, before is not None and
                                self.changed is not None)
        record, live = versions.write(
            self.out, n, dense, shapes, blocks, base, before, None if base else self.changed,
            {"partition": str(self.cfg.dataset.train), "auc": metrics.get("auc"),
             "rows_evicted": metrics.get("rows_evicted", 0)}, export_dir,
            {evict.SEEN: self.seen} if self.seen is not None else None,
            lambda rows: self.check_eviction(n, rows))
        self.live = n, live
        self.changed, self.expected_live = None, None
        dropped = versions.prune(self.out, cfg.keep_versions)
        log.info("version %d (%s, %d rows written, %d of %d live)%s", n, record["kind"],
                 record["rows_changed"], record["rows_live"], record["table_rows"],
                 f"; pruned {dropped}" if dropped else "")

    def check_eviction(self, n: int, live: int) -> None:
        """The tables must hold the rows the driver's record says (in mode=ps: the servers'
        shrink must have deleted exactly those, else the version's delta would not rebuild
        the servers' tables)."""
        if self.expected_live is not None and live != self.expected_live:
            raise RecrunnerError(f"pass {n}: the tables hold {live} live rows after "
                                 f"eviction, the pass's record says {self.expected_live}: "
                                 "model.evict_after_passes and the parameter servers' "
                                 "delete_after_unseen_days disagree")

    def export_extra(self) -> dict[str, Any]:
        return {"version": self.exported_epoch}

    # --- the run -------------------------------------------------------------------------
    def pending(self) -> list[str]:
        """The partitions still to train, as every process of the job sees them (a partition
        that lands while they look is taken by the next look)."""
        found = partitions.partitions(self.spec, need_success=self.cfg.runner.follow)
        agreed = -int(self.group.max(-float(len(found))))
        return found[self.progress.epoch:agreed]

    def stopping(self) -> bool:
        """Whether any process of the job was told to stop (each gets its own signal)."""
        return self.group.max(float(self.stop.is_set())) > 0

    def run(self) -> dict[str, Any]:
        cfg = self.cfg.runner
        self.out.mkdir(parents=True, exist_ok=True)
        self.restore()
        done = self.progress.epoch
        if done and self.group.is_writer and done not in versions.existing(self.out):
            self.write_version(done, {})  # killed between a pass's checkpoint and its version
        if not cfg.follow:
            partitions.first_partitions(self.spec, need_success=False)  # one-line error
        metrics: dict[str, Any] | None = None
        handlers = self.catch_stop() if cfg.follow else {}
        try:
            while not self.stopping():
                todo = self.pending()
                for part in todo:
                    metrics = self.train_pass(part)
                    if self.stopping():
                        break
                if not cfg.follow:
                    break
                if not todo:
                    self.stop.wait(cfg.follow_interval_s)
        except KeyboardInterrupt:
            raise Interrupted(self.interrupted_message()) from None
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)
            self.loggers.close()
        self.exported_epoch = self.progress.epoch
        return self.finish(metrics if metrics is not None else self.evaluate())

    def catch_stop(self) -> dict[int, Any]:
        """SIGTERM and SIGINT end the follow loop after the pass in progress."""
        def stop(signum: int, frame: Any) -> None:
            log.info("stopping after the pass in progress (signal %d)", signum)
            self.stop.set()

        return {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}


def train_online(cfg: RootConfig) -> dict[str, Any]:
    """mode=local with runner.online=true."""
    from recrunner.train.dygraph import DygraphEngine
    from recrunner.train.group import LocalGroup
    from recrunner.train.reading import Reader

    group = LocalGroup()
    reader = Reader(cfg, group.shard)
    return OnlineDriver(cfg, DygraphEngine(cfg, group, reader), group, reader).run()

