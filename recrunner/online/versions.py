"""`<output_dir>/versions/<n>/`: the model after pass n, as the serving tier loads it.

- `dense.npz`: every parameter that is not an embedding table, whole.
- `table.npz`: the tables (parameters with one row per hashed id bucket). A **base** holds
  every row. A **delta** holds `rows` (the indices changed since version n-1) and, for each
  table, those rows' values. Version 1, and then every `runner.base_every` passes, is a base.
- `graph.onnx`, `export.json`, `probe.npz`: what the sparse tier serves the version with
  (recrunner.sparse): the export's graph with the tables as inputs, its description and its
  self-check. Absent when the export could not be converted (the manifest's `serving_error`).
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
from pathlib import Path
from typing import Any

import numpy as np

from recrunner import atomic, manifest
from recrunner.errors import RecrunnerError

ROOT = "versions"
DENSE, TABLE, MANIFEST = "dense.npz", "table.npz", "manifest.json"
GRAPH = "graph.onnx"
ROWS = "rows"  # a delta's changed row indices (a table's name never is)
log = logging.getLogger(__name__)

Arrays = dict[str, np.ndarray]


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


def folder(out: Path, version: int) -> Path:
    return out / ROOT / str(version)


def _save(path: Path, arrays: Arrays) -> None:
    save: Any = np.savez  # numpy's stubs type **kwds as its own flags
    with open(path, "wb") as fh:
        save(fh, **arrays)


def write(out: Path, version: int, state: Arrays, table_rows: int, previous: Arrays | None,
          base_every: int, meta: dict[str, Any], export_dir: Path | None = None,
          extra: Arrays | None = None, changed: np.ndarray | None = None) -> dict[str, Any]:
    """Version `version` of the model `state`; `previous`: version-1's tables (None: none,
    so a base); `export_dir`: the export of the same model, for the sparse tier's files;
    `extra`: arrays kept with the version as <name>.npy; `changed`: a delta's rows as the
    trainer knows them (mode=ps: the servers' own delta), else those that differ from
    `previous`. Returns its manifest."""
    tables, dense = split(state, table_rows)
    if not tables:
        raise RecrunnerError(f"the model has no table of {table_rows} rows (model."
                             "sparse_feature_number) to version")
    base = previous is None or (version - 1) % base_every == 0
    if base:
        rows = np.arange(table_rows)
    elif changed is not None:
        rows = np.unique(changed)
    else:
        rows = changed_rows(tables, previous or {})
    record: dict[str, Any] = {
        "version": version, "kind": "base" if base else "delta",
        "parent": None if base else version - 1,
        "base": version if base else read_manifest(out, version - 1)["base"],
        "table_rows": table_rows, "rows_changed": int(len(rows)),
        "rows_live": int(live_rows(tables).sum()),
        "tables": {k: list(v.shape) for k, v in tables.items()}, **meta}
    with atomic.writing_dir(folder(out, version), "version") as tmp:
        _save(tmp / DENSE, dense)
        _save(tmp / TABLE, {ROWS: rows, **{k: v[rows] for k, v in tables.items()}})
        names = [DENSE, TABLE]
        for name, array in (extra or {}).items():
            np.save(tmp / f"{name}.npy", array)
            names.append(f"{name}.npy")
        if export_dir is not None:
            names += _serving_files(export_dir, tables, tmp, record)
        record["files"] = manifest.describe(tmp, names)
        (tmp / MANIFEST).write_text(json.dumps(record, indent=1))
    return record


def _serving_files(export_dir: Path, tables: Arrays, tmp: Path, record: dict[str, Any]
                   ) -> list[str]:
    from recrunner.export.spec import META_FILE, PROBE_FILE
    from recrunner.sparse.graph import dense_graph

    try:
        (tmp / GRAPH).write_bytes(dense_graph(export_dir, tables))
    except Exception as exc:  # paddle2onnx cannot convert every graph: no sparse serving then
        record["serving_error"] = " ".join(str(exc).split())[:300]
        log.warning("version %d cannot be served from a sparse store: %s", record["version"],
                    record["serving_error"])
        return []
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


def load(out: Path, version: int) -> tuple[Arrays, Arrays, dict[str, Any]]:
    """(tables, dense, manifest) of a version: its base, then every delta up to it, each
    checked against its manifest's SHA-256 first."""
    record = read_manifest(out, version)
    chain = []
    v = version
    while True:
        m = read_manifest(out, v)
        manifest.check(folder(out, v), m.get("files"), folder(out, v) / MANIFEST)
        chain.append(v)
        if m["kind"] == "base":
            break
        v = int(m["parent"])
    tables: Arrays = {}
    for v in reversed(chain):
        data = _load(folder(out, v) / TABLE)
        rows = data.pop(ROWS)
        if not tables:
            tables = {k: t.copy() for k, t in data.items()}
            continue
        for name, values in data.items():
            tables[name][rows] = values
    dense = _load(folder(out, version) / DENSE)
    return tables, dense, record


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
