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
from recrunner.errors import Interrupted
from recrunner.online import evict, partitions, versions
from recrunner.train import checkpoint
from recrunner.train.driver import RunDriver
from recrunner.train.dygraph import DygraphEngine

log = logging.getLogger("recrunner.train")


class OnlineDriver(RunDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = self.cfg.dataset.train  # the glob; cfg.dataset.train is each pass's own
        self.stop = threading.Event()
        self.previous_tables: versions.Arrays | None = None
        self.seen: np.ndarray | None = None  # each table row's last pass seen (eviction)

    # --- state -------------------------------------------------------------------------
    # --- one pass ------------------------------------------------------------------------
    def train_pass(self, part: str) -> dict[str, Any]:
        n = self.progress.epoch + 1
        where = {"pass": n, "partition": part}
        self.record({**self.evaluate(part), **where}, trigger="progressive")
        self.cfg.dataset.train = part  # what the engine reads
        # The tables as the pass starts: version n-1's, already held for its delta.
        before = (self.previous_tables or self.tables_now()) if self.evict_after else None
        self.train_epoch()
        if before is not None:
            where.update(self.evict(n, before))
        metrics = {**self.evaluate(), **where}
        self.progress.improved(metrics["auc"])
        self.record(metrics, trigger="pass")
        self.save_checkpoint()
        if self.group.is_writer:
            self.write_version(n, metrics)
        return metrics

    # --- table hygiene (model.evict_after_passes) ------------------------------------------
    @property
    def dygraph(self) -> "DygraphEngine":
        assert isinstance(self.engine, DygraphEngine)  # train_online builds the driver so
        return self.engine

    @property
    def evict_after(self) -> int:
        return int(getattr(self.cfg.model, "evict_after_passes", 0))

    def tables_now(self) -> versions.Arrays:
        state = {k: np.asarray(v) for k, v in self.dygraph.net.state_dict().items()}
        return versions.split(state, self.cfg.model.sparse_feature_number)[0]

    def evict(self, n: int, before: versions.Arrays) -> dict[str, int]:
        """After pass n: mark the rows it changed as seen, zero those unseen for
        evict_after_passes passes; returns the counts for the pass's metrics line."""
        rows = self.cfg.model.sparse_feature_number
        if self.seen is None:
            done = n - 1  # passes before this one (a resumed run)
            kept = versions.load_extra(self.out, done, evict.SEEN) if done else None
            self.seen = kept if kept is not None else np.zeros(rows, np.int32)
        now = self.tables_now()
        self.seen[versions.changed_rows(now, before)] = n
        alive = versions.live_rows(now)
        gone = evict.to_evict(self.seen, n, self.evict_after, alive)
        if len(gone):
            self.dygraph.zero_table_rows(gone, rows)
        live = int(alive.sum()) - len(gone)  # the evicted rows were live ones
        log.info("pass %d: %d table rows evicted (unseen for %d passes), %d live", n,
                 len(gone), self.evict_after, live)
        return {"rows_evicted": int(len(gone)), "table_rows_live": live}

    def write_version(self, n: int, metrics: dict[str, Any]) -> None:
        cfg = self.cfg.runner
        if self.previous_tables is None and n > 1 and n - 1 in versions.existing(self.out):
            self.previous_tables = versions.load(self.out, n - 1)[0]  # resumed run
        # The export first: the version's served graph is converted from it.
        self.exported_epoch = n
        export_dir = self.out / "export"
        self.engine.export(export_dir, {"metrics": metrics, **self.export_extra(),
                                        "trained_by": f"mode={self.cfg.mode.name}"},
                           checkpoint.at_epoch(self.out, n))
        state = self.engine.state(checkpoint.checkpoint_root(self.out), n).net
        arrays = {k: np.asarray(v) for k, v in state.items()}
        record = versions.write(self.out, n, arrays, self.cfg.model.sparse_feature_number,
                                self.previous_tables, cfg.base_every,
                                {"partition": str(self.cfg.dataset.train),
                                 "auc": metrics.get("auc"),
                                 "rows_evicted": metrics.get("rows_evicted", 0)}, export_dir,
                                {evict.SEEN: self.seen} if self.seen is not None else None)
        self.previous_tables = {k: v.copy() for k, v in versions.split(
            arrays, self.cfg.model.sparse_feature_number)[0].items()}
        dropped = versions.prune(self.out, cfg.keep_versions)
        log.info("version %d (%s, %d of %d rows)%s", n, record["kind"],
                 record["rows_changed"], record["table_rows"],
                 f"; pruned {dropped}" if dropped else "")

    def export_extra(self) -> dict[str, Any]:
        return {"version": self.exported_epoch}

    # --- the run -------------------------------------------------------------------------
    def pending(self) -> list[str]:
        found = partitions.partitions(self.spec, need_success=self.cfg.runner.follow)
        return found[self.progress.epoch:]

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
            while not self.stop.is_set():
                todo = self.pending()
                for part in todo:
                    metrics = self.train_pass(part)
                    if self.stop.is_set():
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
    from recrunner.train.group import LocalGroup
    from recrunner.train.reading import Reader

    group = LocalGroup()
    reader = Reader(cfg, group.shard)
    return OnlineDriver(cfg, DygraphEngine(cfg, group, reader), group, reader).run()

