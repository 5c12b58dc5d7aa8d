"""`recrun publish RUN`: the cube-transfer role. Model versions of an online run
(`<run>/versions/`, recrunner.online.versions) go into every node of the sparse store, and
the newest goes live once all of them hold it.

For each version not yet on every node, from its base up: its files are checked against their
SHA-256 (a corrupt or truncated version is refused, nothing written), its rows are written to
each node of their shard, then its graph, description, probe and layout, and last its
`complete` mark. A publish killed half-way leaves marks missing, so the live version is
untouched and a rerun writes the version again (writes are idempotent). Before `live` moves,
the version's probe is predicted through every replica of every shard and must match the
trained network: only then is `live` set on every node, and the servers switch to it at
their next poll (serving.watch_interval_s), together.

Afterwards versions no server uses are dropped: the servers' heartbeats name the versions they
still answer with; `live` and the one before it are always kept. Below the oldest kept version
(the floor) each row keeps only its newest field, so a dropped delta costs nothing any more.
"""

import json
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from recrunner import faults, manifest
from recrunner.config.serving import SparseConfig
from recrunner.errors import RecrunnerError
from recrunner.online import versions
from recrunner.sparse.served import open_version
from recrunner.sparse.store import Node, ShardDown, ShardedStore

log = logging.getLogger("recrunner.publish")


class Publisher:
    def __init__(self, cfg: SparseConfig, run_dir: Path, threads: int = 1) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.store = ShardedStore(cfg)
        self.threads = threads
        self.timings: dict[int, float] = {}

    # --- what to publish -----------------------------------------------------------------

    def chain(self, version: int) -> list[int]:
        """`version` and the versions it needs, oldest (its base) first."""
        return versions.chain(self.run_dir, version)

    def newest(self) -> int | None:
        found = versions.existing(self.run_dir)
        return found[-1] if found else None

    # --- one version onto every node -------------------------------------------------------

    def load(self, version: int) -> bool:
        """Write `version` to every node that lacks it; whether any did."""
        folder = versions.folder(self.run_dir, version)
        record = versions.read_manifest(self.run_dir, version)
        files = record.get("files") or {}
        if versions.GRAPH not in files:
            raise RecrunnerError(f"{folder}: version {version} has no served graph: "
                                 f"{record.get('serving_error', 'written before the sparse tier')}")
        # A node's versions below its floor were merged into it and dropped (collect): held.
        todo = [n for n in self.store.nodes
                if version >= self.floor(n) and not self.store.holds(n, version)]
        if not todo:
            return False
        manifest.check(folder, files, folder / versions.MANIFEST)  # refuse a corrupt version
        names = sorted(record["tables"])
        layout = [[k, int(record["tables"][k][1])] for k in names]
        fields: dict[str, Any] = {
            "graph": (folder / versions.GRAPH).read_bytes(),
            "meta": (folder / "export.json").read_bytes(),
            "probe": (folder / "probe.npz").read_bytes(),
            "manifest": json.dumps(record), "layout": json.dumps(layout),
            "kind": record["kind"], "base": int(record["base"])}
        count = len(self.store.shards)
        written: dict[int, list[np.ndarray]] = {n.shard: [] for n in todo}
        rows_total = 0
        t0 = time.perf_counter()
        # A block at a time (a base of a large table is larger than the publisher's memory).
        for rows, data in versions.blocks(self.run_dir, version, check=False):
            values = np.concatenate([data[k].astype(np.float32).reshape(len(rows), -1)
                                     for k in names], axis=1)
            deleted = np.asarray(~values.any(axis=1))  # evicted rows: a deletion, not zeros
            rows_total += len(rows)
            for shard in written:
                mine = rows % count == shard
                written[shard].append(rows[mine])
                for node in todo:
                    if node.shard == shard:
                        self.write_node(node, version, rows[mine], values[mine], deleted[mine])
        for node in todo:
            shard_fields = dict(fields)
            if record["kind"] == "delta":  # what collect() trims when the version is dropped
                shard_fields["rows"] = np.concatenate(
                    [np.empty(0, np.int64), *written[node.shard]]).astype("<i8").tobytes()
            self.put_fields(node, version, shard_fields)
            faults.point("publish.node")
            self.put_fields(node, version, {"complete": 1})
            faults.point("publish.marked")
        self.timings[version] = time.perf_counter() - t0
        log.info("version %d (%s, %d rows) written to %d nodes in %.2f s", version,
                 record["kind"], rows_total, len(todo), self.timings[version])
        return True

    def put_fields(self, node: Node, version: int, fields: dict[str, Any]) -> None:
        key = self.store.key("v", version)
        self.store.must(node, lambda n: n.client.hset(key, mapping=fields),
                        f"take version {version}'s {', '.join(fields)}")

    def floor(self, node: Node) -> int:
        value = self.store.must(node, lambda n: n.client.get(self.store.key("floor")),
                                "give its floor")
        return int(value or 0)

    def write_node(self, node: Node, version: int, ids: np.ndarray, values: np.ndarray,
                   deleted: np.ndarray) -> None:
        step = self.cfg.publish_batch_rows
        width = values.shape[1]
        kept = ~deleted
        for start in range(0, len(ids), step):
            part = slice(start, start + step)
            keep = kept[part]
            self.store.write_rows(node, version, ids[part][keep], values[part][keep], width)
            if not keep.all():
                gone = ids[part][~keep]
                self.store.write_rows(node, version, gone, np.zeros((len(gone), 0)), 0)
            faults.point("publish.rows")

    # --- going live ------------------------------------------------------------------------

    def verify(self, version: int) -> float:
        """The probe through every replica of every shard; RecrunnerError on a mismatch."""
        missing = [str(n) for n in self.store.nodes if not self.store.holds(n, version)]
        if missing:
            raise RecrunnerError(f"version {version} is not complete on {', '.join(missing)}")
        served = open_version(self.store, version, self.threads, 0)
        return max(served.check(replica) for replica in range(self.cfg.replicas))

    def go_live(self, version: int) -> None:
        live = self.store.live()
        for node in self.store.nodes:
            if live is not None and live != version:
                self.store.must(node, lambda n: n.client.set(self.store.key("prev"), live),
                                "record the previous version")
            self.store.must(node, lambda n: n.client.set(self.store.key("live"), version),
                            f"make version {version} live")

    def publish(self, version: int | None = None) -> int:
        """Make `version` (None: the newest) live; returns it."""
        target = version if version is not None else self.newest()
        if target is None:
            raise RecrunnerError(f"{self.run_dir} has no model versions (train it with "
                                 "runner.online=true)")
        t0 = time.perf_counter()
        # Also refills a node that came back empty: then checked and marked live like the rest.
        wrote = [self.load(v) for v in self.chain(target)]
        if self.store.live() == target and not any(wrote):
            self.collect()
            return target
        diff = self.verify(target)
        self.go_live(target)
        log.info("version %d is live (probe within %.2g of the trained network on every "
                 "replica; %.2f s)", target, diff, time.perf_counter() - t0)
        self.collect()
        return target

    # --- dropping what no server reads -----------------------------------------------------

    def in_use(self, node: Node) -> set[int]:
        keys = list(node.client.scan_iter(self.store.key("inuse", "*"), count=1000))
        used: set[int] = set()
        for value in node.client.mget(keys) if keys else []:
            if value:
                used.update(int(v) for v in value.split(b",") if v)
        for name in ("live", "prev"):
            value = node.client.get(self.store.key(name))
            if value is not None:
                used.add(int(value))
        return used

    def collect(self) -> list[int]:
        """Drop the versions below the oldest one in use, on every node; returns them."""
        used: set[int] = set()
        for node in self.store.nodes:
            used |= self.store.must(node, self.in_use, "list the versions in use")
        if not used:
            return []
        floor = min(used)
        dropped: set[int] = set()
        for node in self.store.nodes:
            dropped.update(self.store.must(node, lambda n: self.trim(n, floor),
                                           "drop old versions"))
        if dropped:
            log.info("dropped versions %s from the sparse nodes (oldest in use: %d)",
                     sorted(dropped), floor)
        return sorted(dropped)

    def trim(self, node: Node, floor: int) -> list[int]:
        client = node.client
        old = self.floor(node)
        held = self.store.all_versions(node)
        gone = [v for v in held if v < floor]
        if floor <= old or not gone:
            return []
        span = [v for v in held if old < v <= floor]
        kinds = [client.hget(self.store.key("v", v), "kind") for v in span]
        # No reader looks below the floor's base (scripts.FETCH): fields there go.
        base = int(client.hget(self.store.key("v", floor), "base") or 0)
        if b"base" in kinds:  # every row may have an older field
            self.trim_keys(node, client.scan_iter(f"{self.store.row_prefix}*", count=5000),
                           floor, base)
        else:
            for v in span:
                raw = client.hget(self.store.key("v", v), "rows") or b""
                ids = np.frombuffer(raw, "<i8")
                self.trim_keys(node, (f"{self.store.row_prefix}{i}" for i in ids), floor, base)
        for v in gone:
            client.delete(self.store.key("v", v))
        client.set(self.store.key("floor"), floor)
        return gone

    def trim_keys(self, node: Node, keys: Any, floor: int, base: int, batch: int = 2000
                  ) -> None:
        chunk: list[Any] = []
        for key in keys:
            chunk.append(key)
            if len(chunk) == batch:
                node.trim_script(keys=chunk, args=[floor, base])
                chunk = []
        if chunk:
            node.trim_script(keys=chunk, args=[floor, base])

    # --- following a run -------------------------------------------------------------------

    def follow(self, interval_s: float, stop: threading.Event) -> None:
        """Publish each new version as it appears, until `stop`; a version that fails is
        logged and retried at the next poll."""
        while not stop.is_set():
            newest = self.newest()
            if newest is not None:
                try:
                    self.publish(newest)
                except (RecrunnerError, ShardDown) as exc:
                    log.error("version %d not published: %s", newest, exc)
            else:
                self.collect_quietly()
            stop.wait(interval_s)

    def collect_quietly(self) -> None:
        try:
            self.collect()
        except (RecrunnerError, ShardDown) as exc:
            log.warning("%s", exc)


def stop_on_signals(stop: threading.Event) -> None:
    def handler(signum: int, frame: Any) -> None:
        log.info("stopping (signal %d)", signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)

