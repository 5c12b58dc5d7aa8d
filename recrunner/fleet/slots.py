"""Convert the dataset into Paddle's MultiSlot text format for exe.train_from_dataset.

Each line holds, per slot in use_var order, `<count> <values...>`:
`1 <label> <num_dense> <d1..> <sparse_width> <id1..>` (the feed wants counts, not
`name:value` tokens). The rows come from the project's own reader (same parsing, hashing and
dense transform as mode=local), and are written by pyarrow's CSV writer, so conversion runs at
parsing speed.
"""

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from recrunner import atomic
from recrunner.config.dataset import DatasetConfig
from recrunner.data.arrow_numpy import from_numpy
from recrunner.data.batch import Batch
from recrunner.data.errors import RowErrors
from recrunner.data.reader import Shard, expand_paths, iter_examples
from recrunner.data.schema import Schema

ROWS_PER_FILE = 1_000_000
MANIFEST = "manifest.json"


def batch_table(batch: Batch) -> pa.Table:
    n = len(batch)
    cols: list[pa.Array] = [from_numpy(np.ones(n, np.int8)), from_numpy(batch.label)]
    if batch.dense.shape[1]:  # no dense features: no dense slot (nor input)
        cols.append(from_numpy(np.full(n, batch.dense.shape[1], np.int32)))
        cols += [from_numpy(batch.dense[:, j]) for j in range(batch.dense.shape[1])]
    cols.append(from_numpy(np.full(n, batch.sparse.shape[1], np.int32)))
    cols += [from_numpy(batch.sparse[:, j]) for j in range(batch.sparse.shape[1])]
    return pa.Table.from_arrays(cols, names=[f"c{i}" for i in range(len(cols))])


def source_fingerprint(cfg: DatasetConfig, spec: str, pre: Schema, shard: Shard) -> str:
    """What the converted files depend on: the files (name, size, mtime), parsing, shard."""
    import fsspec

    files = []
    for path in expand_paths(spec):
        fs, _, (p,) = fsspec.get_fs_token_paths(path)
        info = fs.info(p)
        files.append([path, info.get("size"), str(info.get("mtime", info.get("LastModified")))])
    key = {"files": files, "schema": pre.to_dict(),
           "shard": [shard.index, shard.count]}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def convert_shard(cfg: DatasetConfig, spec: str, pre: Schema, errors: RowErrors,
                  shard: Shard, out_dir: Path, rows_per_file: int = ROWS_PER_FILE
                  ) -> tuple[list[str], int]:
    """Write this shard's rows as MultiSlot files in out_dir (reused when up to date)."""
    fingerprint = source_fingerprint(cfg, spec, pre, shard)
    manifest = out_dir / MANIFEST
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        if data.get("fingerprint") == fingerprint:
            return [str(out_dir / f) for f in data["files"]], data["rows"]
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("part-*"):
        old.unlink()
    options = pacsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
    files: list[str] = []
    rows = in_file = 0
    writer: pacsv.CSVWriter | None = None
    for batch in iter_examples(cfg, spec, pre, errors, shard):
        start = 0
        while start < len(batch):
            if writer is None or in_file >= rows_per_file:
                if writer is not None:
                    writer.close()
                files.append(f"part-{len(files):05d}")
                table = batch_table(batch.take(slice(0, 1)))
                writer = pacsv.CSVWriter(str(out_dir / files[-1]), table.schema,
                                           write_options=options)
                in_file = 0
            take = min(len(batch) - start, rows_per_file - in_file)
            writer.write_table(batch_table(batch.take(slice(start, start + take))))
            start += take
            in_file += take
            rows += take
    if writer is not None:
        writer.close()
    atomic.write_text(manifest, json.dumps({"fingerprint": fingerprint, "files": files,
                                            "rows": rows}), "slots")
    return [str(out_dir / f) for f in files], rows
