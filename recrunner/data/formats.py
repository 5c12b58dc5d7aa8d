"""Vectorized parsers for the two on-disk formats, one block of whole lines at a time.

Each parser has a fast path (pyarrow's multithreaded CSV reader plus numpy checks) and, only
for a block in which the fast path finds a problem, a per-line check that names each bad line,
so the good rows of that block are kept and the bad ones reported with their line number.
"""

import io
import re

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from recrunner.data.batch import Batch
from recrunner.data.transform import DENSE_NAMES, NUM_DENSE, NUM_SPARSE, SPARSE_NAMES, Preprocessor

NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
NUMBER_BYTES = re.compile(NUMBER.pattern.encode())
# Below this many bytes (about 100 rows) splitting lines in Python beats pyarrow's fixed
# set-up cost (~1-2 ms a call): the server's small requests take this path.
SMALL_BLOCK_BYTES = 24 << 10


class BlockInvalid(Exception):
    """The fast path rejected a block; the per-line check will find the lines."""


def _read_csv(block: bytes, names: list[str], delimiter: str, types: dict,
              include: list[str] | None = None) -> pa.Table:
    try:
        return pacsv.read_csv(
            io.BytesIO(block),
            read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 24,
                                           use_threads=True),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, quote_char=False),
            convert_options=pacsv.ConvertOptions(column_types=types, include_columns=include,
                                                 strings_can_be_null=False),
        )
    except pa.ArrowInvalid as exc:
        raise BlockInvalid(str(exc)) from exc


def _labels(table: pa.Table, column: str) -> np.ndarray:
    label = table.column(column).to_numpy(zero_copy_only=False)
    if table.column(column).null_count or not np.isin(label, (0, 1)).all():
        raise BlockInvalid("label not 0/1")
    return label.astype(np.float32)


def _dense(table: pa.Table, columns: list[str]) -> np.ndarray:
    raw = np.empty((table.num_rows, len(columns)), np.float32)
    for j, name in enumerate(columns):
        raw[:, j] = table.column(name).to_numpy(zero_copy_only=False)
    if np.isinf(raw).any():
        raise BlockInvalid("infinite dense value")
    return raw


class CriteoFormat:
    """Raw Kaggle Criteo rows: label, I1..I13 (counts, may be empty), C1..C26 (strings)."""

    def __init__(self, pre: Preprocessor, labeled: bool = True, delimiter: str = "\t") -> None:
        self.pre = pre
        self.labeled = labeled
        self.delimiter = delimiter
        self.names = (["label"] if labeled else []) + DENSE_NAMES + SPARSE_NAMES
        self.types = {name: pa.float32() for name in DENSE_NAMES}
        self.types.update({name: pa.dictionary(pa.int32(), pa.string()) for name in SPARSE_NAMES})
        if labeled:
            self.types["label"] = pa.int8()

    def with_delimiter(self, delimiter: str) -> "CriteoFormat":
        return CriteoFormat(self.pre, self.labeled, delimiter)

    def header_delimiter(self, first_line: bytes) -> str | None:
        """The delimiter if `first_line` is a header naming our columns, else None."""
        text = first_line.decode("utf-8", "replace").strip()
        delimiter = "\t" if "\t" in text else ","
        fields = text.split(delimiter)
        if fields[0].strip() != self.names[0]:  # a data row (bad or not), not a header
            return None
        if [f.strip() for f in fields] != self.names:
            raise ValueError(f"header {fields[:3]}... is not {','.join(self.names[:3])},...")
        return delimiter

    def parse(self, block: bytes) -> Batch:
        if len(block) <= SMALL_BLOCK_BYTES:
            return self._parse_small(block)
        table = _read_csv(block, self.names, self.delimiter, self.types)
        label = _labels(table, "label") if self.labeled else np.empty(0, np.float32)
        dense = self.pre.dense(_dense(table, DENSE_NAMES))
        sparse = self.pre.sparse([table.column(name) for name in SPARSE_NAMES])
        return Batch(dense, sparse, label)

    def _parse_small(self, block: bytes) -> Batch:
        """The same result as the pyarrow path, for a few lines."""
        sep = self.delimiter.encode()
        rows = [ln.rstrip(b"\r").split(sep) for ln in block.split(b"\n") if ln.strip()]
        if any(len(r) != len(self.names) for r in rows):
            raise BlockInvalid("column count")
        first = 1 if self.labeled else 0
        label = np.empty(0, np.float32)
        if self.labeled:
            if any(r[0] not in (b"0", b"1") for r in rows):
                raise BlockInvalid("label not 0/1")
            label = np.array([r[0] == b"1" for r in rows], np.float32)
        cells = [v for r in rows for v in r[first:first + NUM_DENSE]]
        if not all(NUMBER_BYTES.match(v) for v in cells if v):
            raise BlockInvalid("dense value not a number")
        raw = np.array([float(v) if v else np.nan for v in cells], np.float32)
        dense = self.pre.dense(raw.reshape(len(rows), NUM_DENSE))
        sparse = self.pre.sparse_from_bytes([v for r in rows for v in r[first + NUM_DENSE:]])
        return Batch(dense, sparse, label)

    def check_line(self, line: str) -> str | None:
        fields = line.split(self.delimiter)
        if len(fields) != len(self.names):
            return f"expected {len(self.names)} columns, got {len(fields)}"
        if self.labeled and fields[0] not in ("0", "1"):
            return f"label must be 0 or 1, got {fields[0]!r}"
        offset = 1 if self.labeled else 0
        for name, value in zip(DENSE_NAMES, fields[offset:offset + NUM_DENSE], strict=True):
            if value and not NUMBER.match(value):
                return f"{name} is not a number: {value!r}"
        return None


class SlotFormat:
    """PaddleRec lines: `click:<y> dense_feature:<x> (x13) 1:<id> ... 26:<id>`, ids pre-hashed."""

    def __init__(self, pre: Preprocessor, labeled: bool = True) -> None:
        self.pre = pre
        self.labeled = labeled
        keys = (["click"] if labeled else []) + ["dense_feature"] * NUM_DENSE
        keys += [str(i) for i in range(1, NUM_SPARSE + 1)]
        self.keys = keys
        # After ':' -> ' ' each line is key value key value ...: 2 columns per token.
        self.names = [f"{kind}{i}" for i in range(len(keys)) for kind in ("k", "v")]
        first = 1 if labeled else 0
        self.dense_cols = [f"v{i}" for i in range(first, first + NUM_DENSE)]
        self.sparse_cols = [f"v{i}" for i in range(first + NUM_DENSE, len(keys))]
        self.types = {c: pa.float32() for c in self.dense_cols}
        self.types.update({c: pa.int64() for c in self.sparse_cols})
        key_type = pa.dictionary(pa.int32(), pa.string())
        self.types.update({f"k{i}": key_type for i in range(len(keys))})
        if labeled:
            self.types["v0"] = pa.int8()

    def header_delimiter(self, first_line: bytes) -> str | None:
        return None

    def parse(self, block: bytes) -> Batch:
        table = _read_csv(block.replace(b":", b" "), self.names, " ", self.types)
        for i, key in enumerate(self.keys):
            seen = table.column(f"k{i}").unique()
            if len(seen) and (len(seen) > 1 or seen[0].as_py() != key):
                raise BlockInvalid(f"token {i} is not {key}")
        label = _labels(table, "v0") if self.labeled else np.empty(0, np.float32)
        dense = _dense(table, self.dense_cols)
        if np.isnan(dense).any():
            raise BlockInvalid("missing dense value")
        sparse = np.stack([table.column(c).to_numpy() for c in self.sparse_cols], axis=1)
        if (sparse < 0).any() or (sparse >= self.pre.num_buckets).any():
            raise BlockInvalid("id out of range")
        return Batch(dense, sparse, label)

    def check_line(self, line: str) -> str | None:
        tokens = line.split()
        if len(tokens) != len(self.keys):
            return f"expected {len(self.keys)} key:value tokens, got {len(tokens)}"
        for i, (token, key) in enumerate(zip(tokens, self.keys, strict=True)):
            name, _, value = token.partition(":")
            if name != key:
                return f"token {i + 1} should be {key}:<value>, got {token!r}"
            if key == "click" and value not in ("0", "1"):
                return f"click must be 0 or 1, got {value!r}"
            if key == "dense_feature" and not NUMBER.match(value):
                return f"dense_feature is not a number: {value!r}"
            if i >= len(self.keys) - NUM_SPARSE:
                if not value.isdigit():
                    return f"slot {key} id is not a non-negative integer: {value!r}"
                if int(value) >= self.pre.num_buckets:
                    return (f"slot {key} id {value} is out of range for "
                            f"model.sparse_feature_number={self.pre.num_buckets}")
        return None
