"""`<output_dir>/versions/<n>/`: the model after pass n, as the serving tier loads it.

- `dense.npz`: every parameter that is not an embedding table, whole.
- `table-<k>.npz` (the manifest's `table_files`): table rows in blocks of at most BLOCK_ROWS,
  each file holding `rows` (their indices) and, for each table, those rows' values. A row
  whose values are all zero is a deletion (an evicted row). A **base** holds every live row
  of the model; a **delta** the rows changed since version n-1. Both hold the rows deleted
  since version n-1; rows a version holds nowhere in its chain are absent (zero). Version 1,
  and then every `runner.base_every` passes, is a base. Written a block at a time from the
  engine's blocks (recrunner.online.tables): in mode=ps straight from the servers' saved
  files, so no process holds the table.
- `graph.onnx`, `export.json`, `probe.npz`: what the sparse tier serves the version with
  (recrunner.sparse): the export's graph with the tables as inputs (written with the export,
  recrunner.sparse.graph.write_served_graph), its description and its self-check. Absent when
  the export could not be converted (the manifest's `serving_error`).
- `manifest.json`: the version, its parent (the version a delta applies to; none for a base),
  its base, the row counts, and every file's size and SHA-256 (recrunner.manifest). It is
  written with the files, into a temporary folder renamed into place (recrunner.atomic), so a
  version is whole or absent.

`prune` keeps the newest `runner.keep_versions`, and every version a kept delta needs (back to
its base).
"""

import json
import logging
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from recrunner import atomic, manifest
from recrunner.errors import RecrunnerError

ROOT = "versions"
DENSE, MANIFEST = "dense.npz", "manifest.json"
TABLE = "table.npz"  # versions written before table blocks: one file
GRAPH = "graph.onnx"
ROWS = "rows"  # a block's row indices (a table's name never is)
BLOCK_ROWS = 1 << 18  # 262,144 rows a file: 10 MB at 9 columns
log = logging.getLogger(__name__)

Arrays = dict[str, np.ndarray]
Block = tuple[np.ndarray, Arrays]  # (row indices, each table's values for them)


def split(state: Arrays, table_rows: int) -> tuple[Arrays, Arrays]:
    """(tables, dense): the tables are the 2-D parameters with one row per id bucket."""
    tables = {k: v for k, v in state.items() if v.ndim == 2 and v.shape[0] == table_rows}
    return tables, {k: v for k, v in state.items() if k not in tables}


def live_rows(tables: Arrays) -> np.ndarray:
    """Mask of the rows holding anything (an evicted row is zero in every table)."""
    mask = np.zeros(next(iter(tables.values())).shape[0], bool)
    for table in tables.values():
        mask |= table.any(axis=1)
    return mask


def changed_rows(tables: Arrays, previous: Arrays) -> np.ndarray:
    mask = np.zeros(next(iter(tables.values())).shape[0], bool)
    for name, table in tables.items():
        mask |= (table != previous[name]).any(axis=1)
    return np.flatnonzero(mask)


def array_blocks(tables: Arrays) -> Iterator[Block]:
    """Tables held in memory, as blocks."""
    n = next(iter(tables.values())).shape[0]
    for start in range(0, n, BLOCK_ROWS):
        rows = np.arange(start, min(start + BLOCK_ROWS, n), dtype=np.int64)
        yield rows, {k: v[start:start + len(rows)] for k, v in tables.items()}


def _block_live(values: Arrays) -> np.ndarray:
    live = np.zeros(len(next(iter(values.values()))), bool)
    for v in values.values():
        live |= v.any(axis=1)
    return live


def folder(out: Path, version: int) -> Path:
    return out / ROOT / str(version)


def _save(path: Path, arrays: Arrays) -> None:
    save: Any = np.savez  # numpy's stubs type **kwds as its own flags
    with open(path, "wb") as fh:
        save(fh, **arrays)


def is_base(version: int, base_every: int, parent_known: bool) -> bool:
    """Whether version `version` is a base: the first, every base_every-th, or one whose
    parent's changes are not known (a delta needs them)."""
    return not parent_known or (version - 1) % base_every == 0


class _TableFiles:
    """A version's table files, written a block at a time."""

    def __init__(self, tmp: Path, shapes: dict[str, list[int]]) -> None:
        self.tmp, self.shapes = tmp, shapes
        self.names: list[str] = []
        self.pending: list[Block] = []
        self.pending_rows = self.rows = 0

    def add(self, rows: np.ndarray, values: Arrays) -> None:
        if not len(rows):
            return
        self.pending.append((rows, values))
        self.pending_rows += len(rows)
        self.rows += len(rows)
        while self.pending_rows >= BLOCK_ROWS:
            self._write(BLOCK_ROWS)

    def delete(self, rows: np.ndarray) -> None:
        for start in range(0, len(rows), BLOCK_ROWS):
            part = rows[start:start + BLOCK_ROWS]
            self.add(part, {k: np.zeros((len(part), s[1]), np.float32)
                            for k, s in self.shapes.items()})

    def flush(self) -> None:
        if self.pending_rows:
            self._write(self.pending_rows)

    def _write(self, n: int) -> None:
        """The first `n` pending rows as the next file."""
        rows = np.concatenate([r for r, _ in self.pending]).astype(np.int64)
        values = {k: np.concatenate([v[k] for _, v in self.pending]) for k in self.shapes}
        name = f"table-{len(self.names):05d}.npz"
        _save(self.tmp / name, {ROWS: rows[:n], **{k: v[:n] for k, v in values.items()}})
        self.names.append(name)
        self.pending = [(rows[n:], {k: v[n:] for k, v in values.items()})] \
            if n < len(rows) else []
        self.pending_rows -= n


def write(out: Path, version: int, dense: Arrays, shapes: dict[str, list[int]],
          blocks: Iterable[Block], base: bool, before: np.ndarray | None,
          changed: np.ndarray | None, meta: dict[str, Any], export_dir: Path | None = None,
          extra: Arrays | None = None, check_live: Callable[[int], None] | None = None
          ) -> tuple[dict[str, Any], np.ndarray]:
    """Version `version`: `dense` the dense parameters, `shapes` each table's, `blocks` every
    row of the model's tables now (any order; all-zero rows are not live); `base` whether to
    write a base; `before` version n-1's live rows (None: none); `changed` a delta's rows (the
    rows the pass changed; None for a base); `export_dir` the export of the same model, for
    the sparse tier's files; `extra` arrays kept with the version as <name>.npy;
    `check_live(live rows)` may refuse the version before it is put in place. Returns its
    manifest and its live rows (the next version's `before`)."""
    if not shapes:
        raise RecrunnerError("the model has no table (model.sparse_feature_number rows) to "
                             "version")
    table_rows = next(iter(shapes.values()))[0]
    if not base and changed is None:
        raise RecrunnerError(f"version {version}: a delta needs the pass's changed rows")
    want = None
    if not base:
        want = np.zeros(table_rows, bool)
        want[np.asarray(changed, np.int64)] = True
    record: dict[str, Any] = {
        "version": version, "kind": "base" if base else "delta",
        "parent": None if base else version - 1,
        "base": version if base else read_manifest(out, version - 1)["base"],
        "table_rows": table_rows, "tables": {k: list(s) for k, s in shapes.items()}, **meta}
    live = np.zeros(table_rows, bool)
    with atomic.writing_dir(folder(out, version), "version") as tmp:
        _save(tmp / DENSE, dense)
        files = _TableFiles(tmp, record["tables"])
        for rows, values in blocks:
            alive = _block_live(values)
            live[rows[alive]] = True
            keep = alive if want is None else alive & want[rows]
            if keep.all():
                files.add(rows, values)
            elif keep.any():
                files.add(rows[keep], {k: v[keep] for k, v in values.items()})
        if before is not None:
            files.delete(np.flatnonzero(before & ~live))
        files.flush()
        record.update(rows_changed=files.rows, rows_live=int(live.sum()),
                      table_files=files.names)
        if check_live is not None:
            check_live(record["rows_live"])
        names = [DENSE, *files.names]
        for name, array in (extra or {}).items():
            np.save(tmp / f"{name}.npy", array)
            names.append(f"{name}.npy")
        if export_dir is not None:
            names += _serving_files(export_dir, tmp, record)
        record["files"] = manifest.describe(tmp, names)
        (tmp / MANIFEST).write_text(json.dumps(record, indent=1))
    return record, live


def _serving_files(export_dir: Path, tmp: Path, record: dict[str, Any]) -> list[str]:
    from recrunner.export.spec import META_FILE, PROBE_FILE
    from recrunner.sparse.graph import served_graph

    graph, error = served_graph(export_dir)
    if graph is None:
        record["serving_error"] = error
        log.warning("version %d cannot be served from a sparse store: %s", record["version"],
                    error)
        return []
    shutil.copyfile(graph, tmp / GRAPH)
    for name in (META_FILE, PROBE_FILE):
        shutil.copyfile(export_dir / name, tmp / name)
    return [GRAPH, META_FILE, PROBE_FILE]


def read_manifest(out: Path, version: int) -> dict[str, Any]:
    path = folder(out, version) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RecrunnerError(f"{path}: not a model version ({exc})") from exc
    return dict(data)


def _load(path: Path) -> Arrays:
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def table_files(record: dict[str, Any]) -> list[str]:
    return list(record.get("table_files", [TABLE]))


def chain(out: Path, version: int) -> list[int]:
    """`version` and the versions it needs, oldest (its base) first."""
    found = [version]
    while (m := read_manifest(out, found[-1]))["kind"] != "base":
        found.append(int(m["parent"]))
    return found[::-1]


def blocks(out: Path, version: int, check: bool = True) -> Iterator[Block]:
    """The rows version `version` itself holds (not its parents'), a file at a time; its files
    checked against their SHA-256 first unless `check` is False (already checked)."""
    record = read_manifest(out, version)
    if check:
        manifest.check(folder(out, version), record.get("files"),
                       folder(out, version) / MANIFEST)
    for name in table_files(record):
        data = _load(folder(out, version) / name)
        rows = data.pop(ROWS).astype(np.int64)
        yield rows, data


def load(out: Path, version: int) -> tuple[Arrays, Arrays, dict[str, Any]]:
    """(tables, dense, manifest) of a version: its base, then every delta up to it, each
    checked against its manifest's SHA-256 first. Holds the whole tables: for tools and tests
    (the publisher and the writer read blocks)."""
    record = read_manifest(out, version)
    versions = chain(out, version)
    for v in versions:
        manifest.check(folder(out, v), read_manifest(out, v).get("files"),
                       folder(out, v) / MANIFEST)
    tables = {k: np.zeros(shape, np.float32) for k, shape in record["tables"].items()}
    for v in versions:
        for rows, values in blocks(out, v, check=False):
            for name, value in values.items():
                tables[name][rows] = value
    dense = _load(folder(out, version) / DENSE)
    return tables, dense, record


def live_mask(out: Path, version: int) -> np.ndarray:
    """The rows live in version `version` (its chain's rows, deletions applied)."""
    record = read_manifest(out, version)
    live = np.zeros(int(record["table_rows"]), bool)
    for v in chain(out, version):
        for rows, values in blocks(out, v):
            live[rows] = _block_live(values)
    return live


def load_extra(out: Path, version: int, name: str) -> np.ndarray | None:
    """An `extra` array of a version (checked against its manifest), None if it has none."""
    record = read_manifest(out, version)
    files = record.get("files") or {}
    if f"{name}.npy" not in files:
        return None
    manifest.check(folder(out, version), {f"{name}.npy": files[f"{name}.npy"]},
                   folder(out, version) / MANIFEST)
    return np.asarray(np.load(folder(out, version) / f"{name}.npy"))


def existing(out: Path) -> list[int]:
    root = out / ROOT
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir()
                  if p.name.isdigit() and (p / MANIFEST).is_file())


def prune(out: Path, keep: int) -> list[int]:
    """Drop versions beyond the newest `keep`, except those a kept delta needs."""
    versions = existing(out)
    kept = set(versions[-keep:])
    for v in sorted(kept):
        kept.add(int(read_manifest(out, v)["base"]))
        kept.update(range(int(read_manifest(out, v)["base"]), v))
    dropped = [v for v in versions if v not in kept]
    for v in dropped:
        shutil.rmtree(folder(out, v), ignore_errors=True)
    return dropped
