"""The server's model source with `serving.sparse.store=redis`: the live version of the sparse
nodes instead of an export directory. It is the export repository (recrunner.serving.repository)
with another stamp and another load: the watcher polls `live`, loads the new version next to
the old one, checks its probe and swaps it in; every request is answered by the one version
it took. At every poll the server tells the nodes which versions it still answers with (the
publisher keeps those), and the loaded version's cache and failover state live on.
"""

import logging
import os
import socket
import uuid
from pathlib import Path

from recrunner.config.serving import ServingConfig
from recrunner.data.schema import Schema
from recrunner.errors import one_line
from recrunner.export.spec import OUTPUT
from recrunner.serving import protocol
from recrunner.serving.engine import Engine
from recrunner.serving.repository import (
    LoadedModel,
    LoadRefused,
    ModelRepository,
    Stamp,
    export_name,
)
from recrunner.sparse.served import open_version
from recrunner.sparse.store import ShardDown, ShardedStore

log = logging.getLogger(__name__)


class SparseRepository(ModelRepository):
    settle = False  # `live` moves in one write, to a version already complete everywhere

    def __init__(self, cfg: ServingConfig, model_dir: Path) -> None:
        super().__init__(model_dir, "onnx", cfg.threads, max(1, cfg.workers), cfg.model_name)
        self.sparse = cfg.sparse
        self.store = ShardedStore(cfg.sparse)
        self.server_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        # Heartbeats outlive a few missed polls, not a dead server.
        self.heartbeat_ttl_s = max(10, int(3 * cfg.watch_interval_s) + 1)

    @property
    def source(self) -> str:
        return (f"the sparse store ({len(self.store.shards)} shards x {self.sparse.replicas} "
                f"replicas, prefix {self.sparse.prefix})")

    def stamp(self) -> Stamp:
        try:
            live = self.store.live()
        except ShardDown as exc:
            raise LoadRefused(str(exc)) from None
        return ((live, 0, 0),) if live is not None else (None,)

    def _load(self, require_probe: bool) -> LoadedModel:
        stamp = self.stamp()
        live = stamp[0][0] if stamp[0] is not None else None
        where = self.source
        if live is None:
            raise LoadRefused(f"{where} has no live version: publish one with recrun publish")
        try:
            served = open_version(self.store, live, self._threads, self.sparse.cache_rows)
            diff = served.check()
            schema = Schema.from_dict(served.meta["schema"])
        except Exception as exc:
            raise LoadRefused(f"cannot load version {live} from {where}: {one_line(exc)}"
                              ) from exc
        engine = Engine("onnx+redis", served.meta, [served.predict] * self._workers,
                        f"max |served - trained| = {diff:.2g} on the probe")
        spec = protocol.Model(schema, (OUTPUT, served.output))
        loaded = LoadedModel(self._name or export_name(served.meta), str(live), spec, engine,
                             stamp)
        self._alive.add(loaded)
        self.tick()  # claim the version before a publisher's next collection
        return loaded

    def tick(self) -> None:
        versions = [int(m.version) for m in list(self._alive)]
        if versions:
            self.store.heartbeat(self.server_id, versions, self.heartbeat_ttl_s)

    def status(self) -> dict[str, object]:
        out = super().status()
        current = self.current
        if current is not None:
            served = getattr(current.engine.predict_fns[0], "__self__", None)
            if served is not None:
                out["sparse_cache"] = {"rows": len(served.cache), "hits": served.cache.hits,
                                       "misses": served.cache.misses}
        return out
