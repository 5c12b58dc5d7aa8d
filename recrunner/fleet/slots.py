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
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from recrunner import atomic
from recrunner.config.dataset import DatasetConfig
from recrunner.config.schema import RootConfig
from recrunner.data.arrow_numpy import from_numpy
from recrunner.data.batch import Batch
from recrunner.data.errors import LineOwners, RowErrors
from recrunner.data.reader import (
    Shard,
    expand_paths,
    iter_examples,
    rows_shared,
    stride_rows,
)
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


class ShardWriter:
    """One shard's MultiSlot files in `out_dir`, `rows_per_file` rows a file."""

    def __init__(self, out_dir: Path, rows_per_file: int) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        # The manifest goes first: a conversion stopped part-way must not leave one that
        # names deleted files as up to date (the launcher rewrites every shard in its pass).
        (out_dir / MANIFEST).unlink(missing_ok=True)
        for old in out_dir.glob("part-*"):
            old.unlink()
        self.out_dir = out_dir
        self.rows_per_file = rows_per_file
        self.options = pacsv.WriteOptions(include_header=False, delimiter=" ",
                                          quoting_style="none")
        self.files: list[str] = []
        self.rows = self.in_file = 0
        self.writer: pacsv.CSVWriter | None = None

    def write(self, batch: Batch) -> None:
        start = 0
        while start < len(batch):
            if self.writer is None or self.in_file >= self.rows_per_file:
                if self.writer is not None:
                    self.writer.close()
                self.files.append(f"part-{len(self.files):05d}")
                table = batch_table(batch.take(slice(0, 1)))
                self.writer = pacsv.CSVWriter(str(self.out_dir / self.files[-1]), table.schema,
                                              write_options=self.options)
                self.in_file = 0
            take = min(len(batch) - start, self.rows_per_file - self.in_file)
            self.writer.write_table(batch_table(batch.take(slice(start, start + take))))
            start += take
            self.in_file += take
            self.rows += take

    def close(self, fingerprint: str, skipped: int) -> tuple[list[str], int]:
        if self.writer is not None:
            self.writer.close()
        atomic.write_text(self.out_dir / MANIFEST, json.dumps(
            {"fingerprint": fingerprint, "files": self.files, "rows": self.rows,
             "skipped": skipped}), "slots")
        return [str(self.out_dir / f) for f in self.files], self.rows


def up_to_date(out_dir: Path, fingerprint: str) -> dict | None:
    manifest = out_dir / MANIFEST
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        if data.get("fingerprint") == fingerprint:
            return cast(dict, data)
    return None


def convert_shard(cfg: DatasetConfig, spec: str, pre: Schema, errors: RowErrors,
                  shard: Shard, out_dir: Path, rows_per_file: int = ROWS_PER_FILE
                  ) -> tuple[list[str], int]:
    """Write this shard's rows as MultiSlot files in out_dir, or reuse them when up to date
    (written by an earlier run, or by the launcher: convert_for_trainers). The malformed rows
    its conversion skipped are counted into `errors` either way."""
    fingerprint = source_fingerprint(cfg, spec, pre, shard)
    data = up_to_date(out_dir, fingerprint)
    if data is not None:
        errors.add(int(data.get("skipped", 0)))
        return [str(out_dir / f) for f in data["files"]], data["rows"]
    before = errors.count
    writer = ShardWriter(out_dir, rows_per_file)
    for batch in iter_examples(cfg, spec, pre, errors, shard):
        writer.write(batch)
    return writer.close(fingerprint, errors.count - before)


def convert_for_trainers(cfg: RootConfig, out: Path) -> None:
    """mode=ps on this machine, before its processes start: when the trainers share
    dataset.train by rows, every trainer's shard in one pass (each trainer would parse the
    whole file for its share: 2 parses of every row for 2 trainers); they find their files up
    to date. Sharing by whole files, or one trainer, each converts its own as in a pod."""
    from recrunner.train.build import dataset_schema

    spec, world = str(cfg.dataset.train), cfg.mode.trainers
    if not rows_shared(len(expand_paths(spec)), world):
        return
    pre = dataset_schema(cfg)
    shards = [Shard(index, world) for index in range(world)]
    dirs = [trainer_shard_dir(out, index, world) for index in range(world)]
    fingerprints = [source_fingerprint(cfg.dataset, spec, pre, s) for s in shards]
    if all(up_to_date(d, f) is not None for d, f in zip(dirs, fingerprints, strict=True)):
        return
    # Each trainer's count for its manifest; the lines logged once for the file, as mode=local
    # logs them (max_logged -1: the owners are silent).
    policy = str(cfg.dataset.on_error)
    owners = {s.index: RowErrors(policy, max_logged=-1) for s in shards}
    logged = RowErrors(policy, cfg.dataset.max_logged_errors)
    writers = [ShardWriter(d, ROWS_PER_FILE) for d in dirs]
    row = 0
    for batch in iter_examples(cfg.dataset, spec, pre, LineOwners(owners, world, logged)):
        for shard, writer in zip(shards, writers, strict=True):
            writer.write(stride_rows(batch, row, shard))
        row += len(batch)
    for shard, writer, fingerprint in zip(shards, writers, fingerprints, strict=True):
        writer.close(fingerprint, owners[shard.index].count)


def trainer_shard_dir(out: Path, rank: int, world: int) -> Path:
    return out / "dist" / "slots" / f"train-{rank}-of-{world}"
