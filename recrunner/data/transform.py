"""Categorical columns -> bucket ids, per declared feature (shared by every row format).

Work is done once per distinct value of a block (pyarrow dictionary-encodes the columns) and
gathered back to the rows: hashing, splitting multi-valued fields and deriving values.
"""

import datetime
from collections.abc import Callable, Mapping
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recrunner.data.arrow_numpy import from_numpy, to_numpy
from recrunner.data.errors import BlockInvalid
from recrunner.data.hashing import bucket_ids, hash_strings, hash_to_buckets
from recrunner.data.schema import Field, Schema

Column: TypeAlias = pa.Array | pa.ChunkedArray


def derive_value(kind: str, text: str) -> str:
    """The derived category of a YYMMDDHH value (Avazu's `hour`); ValueError if malformed."""
    if len(text) != 8 or not text.isdigit():
        raise ValueError(f"expected YYMMDDHH, got {text!r}")
    hour = int(text[6:])
    try:
        day = datetime.date(2000 + int(text[:2]), int(text[2:4]), int(text[4:6]))
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a YYMMDDHH time: {exc}") from None
    if hour > 23:
        raise ValueError(f"hour {hour} of {text!r} is not 00..23")
    return f"{hour:02d}" if kind == "hour_of_day" else str(day.weekday())


def _per_distinct(column: Column, width: int, fn: Callable[[pa.Array], np.ndarray]) -> np.ndarray:
    """fn over each chunk's distinct values ([n_distinct, width] ids), gathered to the rows."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out = [np.empty((0, width), np.int64)]
    for chunk in chunks:
        if not pa.types.is_dictionary(chunk.type):
            chunk = chunk.dictionary_encode()
        values = chunk.dictionary.cast(pa.string())
        idx = chunk.indices
        if chunk.null_count:  # a null is the empty string
            values = pa.concat_arrays([values, pa.array([""], pa.string())])
            idx = pc.fill_null(idx, len(chunk.dictionary))
        out.append(fn(values)[to_numpy(idx)])
    return np.concatenate(out)


def _derived_ids(f: Field, column: Column) -> np.ndarray:
    kind = f.derive
    assert kind is not None  # only called for derived features

    def table(values: pa.Array) -> np.ndarray:
        try:
            derived = pa.array([derive_value(kind, v) for v in values.to_pylist()])
        except ValueError as exc:
            raise BlockInvalid(f"{f.column}: {exc}") from exc
        return hash_to_buckets(derived, f.salt, f.buckets, f.offset)[:, None]

    return _per_distinct(column, 1, table)


def _multi_ids(f: Field, column: Column, pad_id: int) -> np.ndarray:
    def table(values: pa.Array) -> np.ndarray:
        lists = pc.split_pattern(values, f.multi_value)
        counts = np.diff(to_numpy(lists.offsets))
        tokens = lists.flatten()
        row = np.repeat(np.arange(len(values)), counts)
        keep = to_numpy(pc.binary_length(tokens)) > 0  # "a||b", ""
        row, tokens = row[keep], tokens.filter(from_numpy(keep))
        kept = np.bincount(row, minlength=len(values))
        if not f.allow_empty and (kept == 0).any():
            raise BlockInvalid(f"{f.column}: empty multi-valued field")
        pos = np.arange(len(row)) - (np.cumsum(kept) - kept)[row]
        first = pos < f.width  # values past max_len are dropped
        out = np.full((len(values), f.width), pad_id, np.int64)
        out[row[first], pos[first]] = hash_to_buckets(
            tokens.filter(from_numpy(first)), f.salt, f.buckets, f.offset)
        return out

    return _per_distinct(column, f.width, table)


def field_ids(schema: Schema, f: Field, column: Column) -> np.ndarray:
    """Ids of one categorical feature: [N] when single-valued, else [N, max_len]."""
    if f.multi_value is not None:
        assert schema.pad_id is not None  # set whenever a feature is multi-valued
        return _multi_ids(f, column, schema.pad_id)
    if f.derive is not None:
        return _derived_ids(f, column)[:, 0]
    return hash_to_buckets(column, f.salt, f.buckets, f.offset)


def plain_ids(schema: Schema, columns: Mapping[str, Column], n: int) -> np.ndarray | None:
    """sparse_ids of a plain schema in one hashing pass over every field's distinct values (26
    passes cost ≈ 26x one at serving's block sizes); None unless each column is one
    dictionary-encoded chunk without nulls (the field-by-field path handles the rest)."""
    chunks = []
    for f in schema.fields:
        column = columns[f.column]
        if isinstance(column, pa.ChunkedArray):
            if column.num_chunks != 1:
                return None
            column = column.chunk(0)
        if not pa.types.is_dictionary(column.type) or column.null_count:
            return None
        chunks.append(column)
    sizes = np.array([len(c.dictionary) for c in chunks], np.int64)
    values = pa.concat_arrays([c.dictionary.cast(pa.large_string()) for c in chunks])
    salts = np.array([f.salt for f in schema.fields], np.uint64)
    buckets = np.array([f.buckets for f in schema.fields], np.uint64)
    offsets = np.array([f.offset for f in schema.fields], np.int64)
    ids = bucket_ids(hash_strings(values, np.repeat(salts, sizes)), np.repeat(buckets, sizes),
                     np.repeat(offsets, sizes))
    out = np.empty((n, len(chunks)), np.int64)
    start = 0
    for k, (chunk, size) in enumerate(zip(chunks, sizes, strict=True)):
        out[:, k] = ids[start:start + size][to_numpy(chunk.indices)]
        start += size
    return out


def sparse_ids(schema: Schema, columns: Mapping[str, Column], n: int) -> np.ndarray:
    """The id matrix int64 [n, sparse_width] from each feature's column."""
    if schema.is_plain and (ids := plain_ids(schema, columns, n)) is not None:
        return ids
    out = np.empty((n, schema.sparse_width), np.int64)
    start = 0
    for f in schema.fields:
        ids = field_ids(schema, f, columns[f.column])
        if f.width == 1 and ids.ndim == 1:
            out[:, start] = ids
        else:
            out[:, start:start + f.width] = ids
        start += f.width
    return out
