"""The Redis nodes of `serving.sparse`: shards of rows, each on `replicas` nodes that hold the
same data. Reads go to one node of each shard and fail over to the next; writes (the
publisher's) go to every node. The row layout is in recrunner.sparse.scripts.

Keys on every node, under `serving.sparse.prefix` (P):
- `P:r:<id>`: the row's versions (scripts);
- `P:v:<version>`: the version's served graph, export.json, probe, manifest, row layout, this
  shard's changed ids (deltas), and `complete`, set last, once the node holds all of it;
- `P:live`, `P:prev`: the version servers serve, and the one before it;
- `P:floor`: the oldest version whose rows are kept (below it, only what it reads survives);
- `P:inuse:<server>`: the versions a server still answers with (expiring heartbeats).
"""

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from recrunner.config.serving import SparseConfig
from recrunner.errors import RecrunnerError
from recrunner.serving.dataplane import NotReady
from recrunner.sparse import scripts

log = logging.getLogger(__name__)
T = TypeVar("T")
DOWN_FOR_S = 1.0  # a node that failed is tried last for this long (no timeout per request)


class ShardDown(NotReady):
    """No node of a shard answers (or holds the version): 503, naming the shard."""


class NodeUnreachable(RecrunnerError):
    """A node the command needs does not answer (exit 1: not the user's input)."""

    exit_code = 1


class NodeError(NodeUnreachable):
    """A write or a check on one node failed; the message names the node."""


@dataclass
class Node:
    address: str  # host:port
    shard: int
    replica: int
    client: Any
    fetch_script: Any
    write_script: Any
    trim_script: Any
    down_until: float = field(default=0.0)

    def __str__(self) -> str:
        return f"shard {self.shard} replica {self.replica} ({self.address})"


class ShardedStore:
    def __init__(self, cfg: SparseConfig) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.cfg = cfg
        self.prefix = cfg.prefix
        self.row_prefix = f"{cfg.prefix}:r:"
        self.errors: tuple[type[BaseException], ...] = (redis.ConnectionError,
                                                         redis.TimeoutError, redis.ResponseError)
        nodes = list(cfg.shards)
        r = cfg.replicas
        self.shards: list[list[Node]] = []
        for s in range(len(nodes) // r):
            group = []
            for i, address in enumerate(nodes[s * r:(s + 1) * r]):
                host, port = address.rsplit(":", 1)
                # No retries inside the client: the next replica is the retry, and a shard with
                # none left answers 503 within timeout_s per node instead of after backoffs.
                client = redis.Redis(host=host, port=int(port), socket_timeout=cfg.timeout_s,
                                     socket_connect_timeout=cfg.timeout_s,
                                     retry=Retry(NoBackoff(), 0))
                group.append(Node(address, s, i, client, client.register_script(scripts.FETCH),
                                  client.register_script(scripts.WRITE),
                                  client.register_script(scripts.TRIM)))
            self.shards.append(group)

    @property
    def nodes(self) -> Iterator[Node]:
        for group in self.shards:
            yield from group

    def key(self, *parts: object) -> str:
        return ":".join([self.prefix, *map(str, parts)])

    # --- reads (servers) ---------------------------------------------------------------------

    def on_shard(self, shard: int, fn: Callable[[Node], T], what: str) -> T:
        """`fn` on the first node of `shard` that answers (nodes that failed lately last);
        ShardDown naming the shard when none does."""
        group = sorted(self.shards[shard], key=lambda n: n.down_until > time.monotonic())
        reasons = []
        for node in group:
            try:
                return fn(node)
            except self.errors as exc:
                node.down_until = time.monotonic() + DOWN_FOR_S
                reasons.append(f"{node.address}: {_reason(exc)}")
        raise ShardDown(f"sparse shard {shard} cannot {what}: "
                        f"{'; '.join(reasons)}")

    def fetch(self, ids: np.ndarray, version: int, width: int,
              replica: int | None = None) -> np.ndarray:
        """Rows [len(ids), width] float32 of version `version` (zeros: a row never written or
        deleted). `replica`: read that replica of every shard, with no failover (checks)."""
        out = np.empty((len(ids), width), np.float32)
        count = len(self.shards)
        owner = ids % count
        for shard in range(count):
            mask = owner == shard
            if not mask.any():
                continue
            packed = ids[mask].astype("<i8").tobytes()

            def read(node: Node, packed: bytes = packed) -> bytes:
                return bytes(node.fetch_script(keys=[self.key("v", version)],
                                               args=[version, packed, width * 4,
                                                     self.row_prefix]))

            if replica is None:
                raw = self.on_shard(shard, read, f"give version {version}'s rows")
            else:
                node = self.shards[shard][replica]
                try:
                    raw = read(node)
                except self.errors as exc:
                    raise NodeError(f"{node}: {_reason(exc)}") from exc
            out[mask] = np.frombuffer(raw, np.float32).reshape(-1, width)
        return out

    def first_answer(self, fn: Callable[[Node], T], what: str) -> T:
        """`fn` on the first node of any shard that answers (data every node holds)."""
        reasons = []
        for node in self.nodes:
            try:
                return fn(node)
            except self.errors as exc:
                reasons.append(f"{node.address}: {_reason(exc)}")
        raise ShardDown(f"no sparse node can {what}: {'; '.join(reasons)}")

    def live(self) -> int | None:
        """The live version (None: nothing published yet)."""
        value = self.first_answer(lambda n: n.client.get(self.key("live")),
                                  "say the live version")
        return int(value) if value is not None else None

    def version_fields(self, version: int, *names: str) -> list[bytes | None]:
        return list(self.first_answer(
            lambda n: n.client.hmget(self.key("v", version), names),
            f"give version {version}"))

    def heartbeat(self, server: str, versions: list[int], ttl_s: int) -> None:
        """Tell publishers which versions this server still answers with (on every node that
        answers: any of them may run the next collection)."""
        value = ",".join(map(str, sorted(set(versions))))
        for node in self.nodes:
            with contextlib.suppress(*self.errors):  # down: the others carry the heartbeat
                node.client.set(self.key("inuse", server), value, ex=ttl_s)

    # --- writes (the publisher) --------------------------------------------------------------

    def must(self, node: Node, fn: Callable[[Node], T], what: str) -> T:
        try:
            return fn(node)
        except self.errors as exc:
            raise NodeError(f"{node} cannot {what}: {_reason(exc)}") from exc

    def holds(self, node: Node, version: int) -> bool:
        return bool(self.must(node, lambda n: n.client.hexists(self.key("v", version),
                                                               "complete"),
                              f"say whether it holds version {version}"))

    def write_rows(self, node: Node, version: int, ids: np.ndarray, values: np.ndarray,
                   width: int) -> None:
        """Rows `ids` of `version` (values [n, width] float32; width 0: deletions)."""
        packed, data = ids.astype("<i8").tobytes(), np.ascontiguousarray(values, "<f4").tobytes()
        self.must(node, lambda n: n.write_script(args=[version, packed, data, width * 4,
                                                       self.row_prefix]),
                  f"take version {version}'s rows")

    def all_versions(self, node: Node) -> list[int]:
        keys = self.must(node, lambda n: list(n.client.scan_iter(self.key("v", "*"),
                                                                 count=1000)),
                         "list its versions")
        return sorted(int(k.rsplit(b":", 1)[1]) for k in keys)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__
