"""One model version as the sparse tier serves it: the version's graph (recrunner.sparse.graph)
run by ONNX Runtime on the rows of the batch's ids, read at that version from the shards
(recrunner.sparse.store) or from the version's row cache.

A batch's ids are made unique and renumbered 0..n-1; the graph gets those n rows as its
tables, so it computes what the whole-table export computes (an embedding lookup is a gather).
The version's probe, recorded by the export's self-check, must come out within the export's
tolerance before a version is served.
"""

import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from recrunner.errors import RecrunnerError
from recrunner.export.check import TOLERANCE, Probe
from recrunner.export.spec import DENSE_INPUT, SPARSE_INPUT, input_names
from recrunner.sparse.cache import RowCache
from recrunner.sparse.store import ShardedStore

# The fields of a version's hash a server reads.
FIELDS = ("graph", "meta", "probe", "layout")


@dataclass
class ServedVersion:
    version: int
    meta: dict[str, Any]  # export.json
    layout: list[tuple[str, int]]  # the tables, in row order: (parameter name, columns)
    probe: Probe
    session: Any
    output: str
    store: ShardedStore
    cache: RowCache

    @property
    def width(self) -> int:
        return sum(d for _, d in self.layout)

    def rows(self, ids: np.ndarray, replica: int | None = None) -> np.ndarray:
        """Rows of sorted unique `ids`: the cache's, the rest read from the shards."""
        if replica is not None:  # a check of one replica: no cache
            return self.store.fetch(ids, self.version, self.width, replica)
        hit, cached = self.cache.lookup(ids)
        if hit.all():
            return cached
        out = np.empty((len(ids), self.width), np.float32)
        out[hit] = cached
        missing = ids[~hit]
        read = self.store.fetch(missing, self.version, self.width)
        out[~hit] = read
        self.cache.add(missing, read)
        return out

    def predict(self, dense: np.ndarray, sparse: np.ndarray, replica: int | None = None
                ) -> np.ndarray:
        """Click probabilities float32 [N] of a checked batch."""
        ids, local = np.unique(sparse, return_inverse=True)
        rows = self.rows(ids, replica)
        feeds: dict[str, np.ndarray] = {}
        for name in input_names(self.meta):
            if name == DENSE_INPUT:
                feeds[name] = dense
            elif name == SPARSE_INPUT:
                feeds[name] = local.reshape(sparse.shape).astype(np.int64, copy=False)
        start = 0
        for name, dim in self.layout:
            feeds[name] = np.ascontiguousarray(rows[:, start:start + dim])
            start += dim
        return self.session.run([self.output], feeds)[0].reshape(-1)

    def batch(self, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(dense, sparse) of arrays in the export's input order."""
        by_name = dict(zip(input_names(self.meta), arrays, strict=True))
        sparse = by_name[SPARSE_INPUT]
        return by_name.get(DENSE_INPUT, np.zeros((len(sparse), 0), np.float32)), sparse

    def check(self, replica: int | None = None) -> float:
        """Max |served - trained| over the probe; RecrunnerError above the tolerance."""
        got = self.predict(*self.batch(*self.probe.inputs), replica=replica)
        diff = float(np.abs(got - self.probe.expected).max())
        if diff > TOLERANCE:
            where = "" if replica is None else f" (replica {replica} of every shard)"
            raise RecrunnerError(f"version {self.version} served from the sparse store{where} "
                                 f"differs from the trained network by {diff:.3g} on its probe "
                                 f"(tolerance {TOLERANCE:g})")
        return diff


def open_version(store: ShardedStore, version: int, threads: int, cache_rows: int
                 ) -> ServedVersion:
    """Version `version` from the nodes; RecrunnerError when it is missing or incomplete."""
    import onnxruntime as ort

    graph, meta, probe, layout = store.version_fields(version, *FIELDS)
    if graph is None or meta is None or probe is None or layout is None:
        raise RecrunnerError(f"version {version} is not on the sparse nodes (publish it with "
                             "recrun publish)")
    meta_d = json.loads(meta)
    tables = [(str(n), int(d)) for n, d in json.loads(layout)]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])
    return ServedVersion(version, meta_d, tables,
                         Probe.load(io.BytesIO(probe), input_names(meta_d)),
                         session, session.get_outputs()[0].name, store,
                         RowCache(cache_rows, sum(d for _, d in tables)))
