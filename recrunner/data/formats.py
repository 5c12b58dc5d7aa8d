"""Row formats: how a block of whole lines becomes a Batch, for any declared schema.

One class per on-disk format (`delimited` TSV/CSV rows, PaddleRec `slot` lines), chosen by
`row_format(schema, labeled)`; the reader, `recrun predict` and the server all use it. Each has
a fast path (pyarrow's multithreaded CSV reader plus numpy checks) and, only for a block in
which the fast path finds a problem, a per-line check naming the line's bad column, so the good
rows of that block are kept and the bad ones reported by file, line and column.
"""

import io
import re
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from recrunner.data.arrow_numpy import to_numpy
from recrunner.data.batch import Batch
from recrunner.data.errors import BlockInvalid, DataError
from recrunner.data.hashing import bucket_ids, hash_byte_strings
from recrunner.data.schema import Schema
from recrunner.data.transform import derive_value, sparse_ids

__all__ = ["BlockInvalid", "DelimitedFormat", "RowFormat", "SlotFormat", "object_lines",
           "parse_objects", "row_format"]

# ASCII digits only (str's \d takes any script's, which pyarrow does not parse), and the spaces
# and tabs around a number that pyarrow's float parser trims; \Z, as $ also matches before "\n".
NUMBER = re.compile(r"[ \t]*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[ \t]*\Z", re.ASCII)
NUMBER_BYTES = re.compile(NUMBER.pattern.encode())
# Cells joined by newlines, each empty or a NUMBER: one regex call for a block's dense cells.
# Atomic per cell: a cell's match is never revisited (else a bad last cell would backtrack
# through every way of splitting each earlier cell's digits: exponential).
NUMBER_CELLS = re.compile(rb"(?:(?>" + NUMBER.pattern.encode().removesuffix(rb"\Z")
                          + rb")?\n)*+\Z", re.ASCII)
LABELS = ("0", "1")
# What a blank line (skipped, not a row) may hold: not tabs, since a TSV row of empty fields
# ("\t\t...") is a row to pyarrow.
BLANK = b" \r"
# Below this many bytes (about 100 Criteo rows) splitting lines in Python beats pyarrow's fixed
# set-up cost (~1-2 ms a call): the server's small requests take this path.
SMALL_BLOCK_BYTES = 24 << 10


class RowFormat(Protocol):
    schema: Schema
    labeled: bool

    @property
    def key(self) -> Hashable:
        """Equal keys parse each other's lines alike (the server merges such requests)."""

    def start(self, first_line: bytes) -> tuple["RowFormat", int]:
        """Settle per-file details from its first line, once: (format, header lines to skip).
        ValueError names what is wrong with a header."""

    def parse(self, block: bytes) -> Batch:
        """Whole lines -> Batch; BlockInvalid if any line is bad."""

    def check_line(self, line: str) -> str | None:
        """Why one line is bad (naming the column), or None."""


def _read_csv(block: bytes, names: list[str], delimiter: str, types: dict,
              include: list[str] | None = None) -> pa.Table:
    try:
        return pacsv.read_csv(
            io.BytesIO(block),
            read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 24,
                                           use_threads=True),
            parse_options=pacsv.ParseOptions(delimiter=delimiter, quote_char=False),
            # Only an empty cell is missing: pyarrow's default nulls ("NA", "NULL", "nan", ...)
            # would make a malformed dense value a silent 0 here and an error per line.
            convert_options=pacsv.ConvertOptions(column_types=types, include_columns=include,
                                                 strings_can_be_null=False, null_values=[""]),
        )
    except pa.ArrowInvalid as exc:
        raise BlockInvalid(str(exc)) from exc


# The label is read as text: an int8 column would also take " 1" and "01", which the per-line
# check (and the small-block path) reject.
LABEL_TYPE = pa.dictionary(pa.int32(), pa.string())


def _labels(table: pa.Table, column: str) -> np.ndarray:
    out = [np.empty(0, np.float32)]
    for chunk in table.column(column).chunks:
        values = chunk.dictionary.to_pylist()
        if chunk.null_count or not set(values) <= set(LABELS):
            raise BlockInvalid("label not 0/1")
        out.append(np.array([v == "1" for v in values], np.float32)[to_numpy(chunk.indices)])
    return np.concatenate(out)


def _dense(table: pa.Table, columns: list[str]) -> np.ndarray:
    raw = np.empty((table.num_rows, len(columns)), np.float32)
    nulls = 0
    for j, name in enumerate(columns):
        raw[:, j] = to_numpy(table.column(name))
        nulls += table.column(name).null_count
    if np.isinf(raw).any():
        raise BlockInvalid("infinite dense value")
    if np.isnan(raw).sum() != nulls:  # "nan" parsed as a number, not an empty cell
        raise BlockInvalid("NaN dense value")
    return raw


class DelimitedFormat:
    """TSV/CSV rows laid out as `schema.columns` (label-less rows lack the label column)."""

    def __init__(self, schema: Schema, labeled: bool = True, delimiter: str | None = None,
                 header: str | None = None) -> None:
        self.schema = schema
        self.labeled = labeled
        given = delimiter or schema.delimiter
        self.delimiter = "\t" if given == "auto" else given
        self._auto_delimiter = delimiter is None and schema.delimiter == "auto"
        self.header = header or schema.header
        self.names = schema.names(labeled)
        index = {name: i for i, name in enumerate(self.names)}
        self._label = index[schema.label] if labeled else None
        self._dense_cols = [d.column for d in schema.dense]
        self._dense_idx = [index[c] for c in self._dense_cols]
        sparse_cols = list(dict.fromkeys(f.column for f in schema.fields))
        self._sparse_idx = {c: index[c] for c in sparse_cols}
        self.types = {c: pa.float32() for c in self._dense_cols}
        self.types.update({c: pa.dictionary(pa.int32(), pa.string()) for c in sparse_cols})
        if labeled:
            self.types[schema.label] = LABEL_TYPE
        ignored = [c for c in self.names if c not in self.types]
        self._include = [c for c in self.names if c in self.types] if ignored else None
        # The Python path hashes plain fields in one call: per value its salt, range, offset.
        self._plain = schema.is_plain
        self._salts = np.array([f.salt for f in schema.fields], np.uint64)
        self._buckets = np.array([f.buckets for f in schema.fields], np.uint64)
        self._offsets = np.array([f.offset for f in schema.fields], np.int64)
        self._plain_idx = [index[f.column] for f in schema.fields]
        self._by_delimiter: dict[str, DelimitedFormat] = {}

    @property
    def key(self) -> Hashable:
        return "delimited", self.labeled, self.delimiter

    def with_delimiter(self, delimiter: str) -> "DelimitedFormat":
        # Built once per delimiter: the server asks on every request (with an auto
        # delimiter), and building one (Arrow types, id arrays) cost a third of a
        # single-row /predict's parse.
        made = self._by_delimiter.get(delimiter)
        if made is None:
            made = DelimitedFormat(self.schema, self.labeled, delimiter, self.header)
            self._by_delimiter[delimiter] = made
        return made

    def start(self, first_line: bytes) -> tuple["DelimitedFormat", int]:
        text = first_line.decode("utf-8", "replace").rstrip("\r\n")
        fmt = self
        if self._auto_delimiter:
            delimiter = "\t" if "\t" in text else "," if "," in text else "\t"
            fmt = self.with_delimiter(delimiter)
        fields = [f.strip() for f in text.split(fmt.delimiter)]
        if self.header == "false":
            return fmt, 0
        if fields == self.names:
            return fmt, 1
        if self.header == "true" or fields[0] == self.names[0]:
            # A header (or what starts like one) that does not name our columns.
            bad = next((i for i, (a, b) in enumerate(zip(fields, self.names, strict=False))
                        if a != b),
                       min(len(fields), len(self.names)))
            got = repr(fields[bad]) if bad < len(fields) else "nothing"
            want = repr(self.names[bad]) if bad < len(self.names) else "no more columns"
            raise ValueError(f"header column {bad + 1} is {got}, expected {want} "
                             f"(dataset.schema.columns: {','.join(self.names[:3])},...)")
        return fmt, 0

    def parse(self, block: bytes) -> Batch:
        if len(block) <= SMALL_BLOCK_BYTES:
            return self._parse_small(block)
        table = _read_csv(block, self.names, self.delimiter, self.types, self._include)
        label = _labels(table, self.schema.label) if self.labeled else np.empty(0, np.float32)
        dense = self.schema.transform_dense(_dense(table, self._dense_cols))
        columns = {c: table.column(c) for c in self._sparse_idx}
        return Batch(dense, sparse_ids(self.schema, columns, table.num_rows), label)

    def _parse_small(self, block: bytes) -> Batch:
        """The same result as the pyarrow path, for a few lines."""
        sep = self.delimiter.encode()
        lines = [ln.rstrip(b"\r") for ln in block.split(b"\n") if ln.strip(BLANK)]
        if b"\r" in block and any(b"\r" in ln for ln in lines):
            raise BlockInvalid("carriage return inside a line")  # pyarrow ends a line there
        if not block.isascii():
            try:  # pyarrow rejects such a block too; the per-line path reads it as text
                block.decode()
            except UnicodeDecodeError as exc:
                raise BlockInvalid("not UTF-8") from exc
        if not lines:  # blank lines only (the reshapes below cannot infer a width of 0 rows)
            return Batch.empty(self.schema.num_dense, self.schema.sparse_width)
        rows = [ln.split(sep) for ln in lines]
        if any(len(r) != len(self.names) for r in rows):
            raise BlockInvalid("column count")
        n = len(rows)
        label = np.empty(0, np.float32)
        if self._label is not None:
            j = self._label
            if any(r[j] not in (b"0", b"1") for r in rows):
                raise BlockInvalid("label not 0/1")
            label = np.array([r[j] == b"1" for r in rows], np.float32)
        cells = [r[j] for r in rows for j in self._dense_idx]
        # One regex and one numpy cast for all cells (per-cell calls were half the parse).
        if cells and not NUMBER_CELLS.match(b"\n".join(cells) + b"\n"):
            raise BlockInvalid("dense value not a number")
        raw = np.full(len(cells), np.nan, np.float32)
        if cells:
            text = np.array(cells, np.bytes_)
            given = text != b""
            with np.errstate(over="ignore"):  # float() then float32, as before: same values
                raw[given] = text[given].astype(np.float64).astype(np.float32)
        if np.isinf(raw).any():  # out of float32 range, as the pyarrow path rejects
            raise BlockInvalid("infinite dense value")
        dense = self.schema.transform_dense(raw.reshape(n, len(self._dense_idx)))
        if self._plain:  # one hashing call for every value of the block
            hashed = hash_byte_strings([r[j] for r in rows for j in self._plain_idx],
                                       np.tile(self._salts, n))
            sparse = bucket_ids(hashed.reshape(n, -1), self._buckets, self._offsets)
        else:
            columns = {c: pa.array([r[j] for r in rows], pa.binary()).cast(pa.string())
                       for c, j in self._sparse_idx.items()}
            sparse = sparse_ids(self.schema, columns, n)
        return Batch(dense, sparse, label)

    def check_line(self, line: str) -> str | None:
        if "\r" in line:
            return "carriage return inside the line"
        fields = line.split(self.delimiter)
        names = self.names
        if len(fields) != len(names):
            detail = (f"no {', '.join(names[len(fields):][:3])}" if len(fields) < len(names)
                      else f"extra after {names[-1]}")
            return f"expected {len(names)} columns, got {len(fields)} ({detail})"
        if self._label is not None and fields[self._label] not in LABELS:
            return f"{self.schema.label} must be 0 or 1, got {fields[self._label]!r}"
        for column, j in zip(self._dense_cols, self._dense_idx, strict=True):
            value = fields[j]
            if value and not NUMBER.match(value):
                return f"{column} is not a number: {value!r}"
            if value and not np.isfinite(np.float32(value)):
                return f"{column} is out of float32 range: {value!r}"
        for f in self.schema.fields:
            value = fields[self._sparse_idx[f.column]]
            if f.multi_value is not None and not f.allow_empty and not any(
                    value.split(f.multi_value)):
                return f"{f.column}: empty multi-valued field ({f.name} has allow_empty: false)"
            if f.derive is not None:
                try:
                    derive_value(f.derive, value)
                except ValueError as exc:
                    return f"{f.column}: {exc}"
        return None


class SlotFormat:
    """PaddleRec lines: `click:<y> dense_feature:<x>... <slot>:<id>...`, ids already hashed."""

    def __init__(self, schema: Schema, labeled: bool = True) -> None:
        self.schema = schema
        self.labeled = labeled
        keys = schema.slot_keys
        self.keys = (([keys["label"]] if labeled else []) + [keys["dense"]] * schema.num_dense
                     + list(keys["sparse"]))
        self.feature = ([schema.label] if labeled else []) + schema.dense_names + [
            f.name for f in schema.fields]
        # After ':' -> ' ' each line is key value key value ...: 2 columns per token.
        self.names = [f"{kind}{i}" for i in range(len(self.keys)) for kind in ("k", "v")]
        first = 1 if labeled else 0
        self.dense_cols = [f"v{i}" for i in range(first, first + schema.num_dense)]
        self.sparse_cols = [f"v{i}" for i in range(first + schema.num_dense, len(self.keys))]
        self.types = {c: pa.float32() for c in self.dense_cols}
        self.types.update({c: pa.int64() for c in self.sparse_cols})
        key_type = pa.dictionary(pa.int32(), pa.string())
        self.types.update({f"k{i}": key_type for i in range(len(self.keys))})
        if labeled:
            self.types["v0"] = LABEL_TYPE
        # Each slot's ids must lie in its feature's rows.
        self._lo = np.array([f.offset for f in schema.fields], np.int64)
        self._hi = self._lo + np.array([f.buckets for f in schema.fields], np.int64)

    @property
    def key(self) -> Hashable:
        return "slot", self.labeled

    def start(self, first_line: bytes) -> tuple["SlotFormat", int]:
        return self, 0

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
        sparse = np.empty((table.num_rows, len(self.sparse_cols)), np.int64)
        for j, c in enumerate(self.sparse_cols):
            sparse[:, j] = to_numpy(table.column(c))
        if (sparse < self._lo).any() or (sparse >= self._hi).any():
            raise BlockInvalid("id out of range")
        return Batch(dense, sparse, label)

    def check_line(self, line: str) -> str | None:
        tokens = line.split(" ")  # as the fast path splits: one space, no tabs
        if len(tokens) != len(self.keys):
            return (f"expected {len(self.keys)} key:value tokens separated by single spaces, "
                    f"got {len(tokens)}")
        first_sparse = len(self.keys) - len(self.schema.fields)
        for i, (token, key) in enumerate(zip(tokens, self.keys, strict=True)):
            name, _, value = token.partition(":")
            if name != key:
                return f"token {i + 1} should be {key}:<value>, got {token!r}"
            if ":" in value:
                return f"token {i + 1} has more than one ':': {token!r}"
            if i == 0 and self.labeled and value not in LABELS:
                return f"{key} must be 0 or 1, got {value!r}"
            if int(self.labeled) <= i < first_sparse:
                if not NUMBER.match(value):
                    return f"{key} ({self.feature[i]}) is not a number: {value!r}"
                with np.errstate(over="ignore"):  # the overflow is what is reported
                    finite = np.isfinite(np.float32(value))
                if not finite:
                    return f"{key} ({self.feature[i]}) is out of float32 range: {value!r}"
            if i >= first_sparse:
                j = i - first_sparse
                if not (value.isascii() and value.isdigit()):  # int() takes other scripts' too
                    return f"slot {key} id is not a non-negative integer: {value!r}"
                if not self._lo[j] <= int(value) < self._hi[j]:
                    return (f"slot {key} id {value} is out of range [{self._lo[j]}, "
                            f"{self._hi[j]}) of {self.feature[i]}")
        return None


FORMATS: dict[str, type] = {"delimited": DelimitedFormat, "slot": SlotFormat}


def row_format(schema: Schema, labeled: bool = True) -> RowFormat:
    """The parser for the schema's on-disk format (rows with or without the label)."""
    return FORMATS[schema.kind](schema, labeled)


# --- JSON objects keyed by column name (the server's /predict) ------------------------------

def _cell(value: Any, column: str, sep: str | None, row: int) -> str:
    if value is None:
        return ""
    if isinstance(value, list) and sep is not None:  # a multi-valued field as a JSON list
        return sep.join(_cell(v, column, None, row) for v in value)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise DataError(f"row {row}: {column} must be a string or number, got "
                        f"{type(value).__name__}")
    text = value if isinstance(value, str) else repr(value)
    if "\t" in text or "\n" in text or "\r" in text:
        raise DataError(f"row {row}: {column} contains a tab or line break")
    return text


def object_format(schema: Schema) -> DelimitedFormat:
    """The format of object_lines' output: label-less TSV rows without a header."""
    return DelimitedFormat(schema, labeled=False, delimiter="\t", header="false")


def object_lines(schema: Schema, objects: Sequence[Mapping[str, Any]],
                 first_row: int = 1) -> list[str]:
    """Objects keyed by column name as object_format() lines (absent keys are empty fields,
    multi-valued fields may be JSON lists); DataError names the row and column."""
    names = schema.names(labeled=False)
    index = {name: i for i, name in enumerate(names)}
    seps = {f.column: f.multi_value for f in schema.fields}
    lines = []
    for row, obj in enumerate(objects, first_row):
        cells = [""] * len(names)
        for key, value in obj.items():
            j = index.get(key)
            if j is None:
                raise DataError(f"row {row}: unknown column {key!r} (expected "
                                f"{', '.join(names[:3])}, ... {names[-1]})")
            cells[j] = _cell(value, key, seps.get(key), row)
        lines.append("\t".join(cells))
    return lines


def parse_objects(schema: Schema, objects: Sequence[Mapping[str, Any]]) -> Batch:
    """Objects keyed by column name -> Batch; DataError names the row and column."""
    fmt = object_format(schema)
    lines = object_lines(schema, objects)
    try:
        return fmt.parse(("\n".join(lines) + "\n").encode())
    except BlockInvalid:
        for row, line in enumerate(lines, 1):
            reason = fmt.check_line(line)
            if reason is not None:
                raise DataError(f"row {row}: {reason}") from None
        raise
