"""Stable, per-field salted hashing of categorical strings into embedding buckets.

Vectorized FNV-1a over the bytes of an Arrow string array, finished with the splitmix64
mixer. Pure arithmetic on the bytes, so every process, run and machine agrees
(unlike Python's salted `hash()`).
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recrunner.data.arrow_numpy import to_numpy

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


def _mix(h: np.ndarray) -> np.ndarray:
    # splitmix64 finalizer: spreads FNV's weak low bits before the modulo.
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def _hash_bytes(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                salt: int | np.ndarray) -> np.ndarray:
    """FNV-1a over data[starts[i]:starts[i] + lengths[i]] for every i, then mixed."""
    h = np.full(len(starts), FNV_OFFSET, dtype=np.uint64) ^ np.asarray(salt, np.uint64)
    with np.errstate(over="ignore"):
        longest = int(lengths.max()) if len(lengths) else 0
        # Once, not a reduction per byte position (most of a single row's hashing).
        shortest = int(lengths.min()) if len(lengths) else 0
        for j in range(longest):
            if j < shortest:
                h = (h ^ data[starts + j]) * FNV_PRIME
            else:  # only strings longer than j take another byte
                live = lengths > j
                h[live] = (h[live] ^ data[starts[live] + j]) * FNV_PRIME
        return _mix(h ^ lengths.astype(np.uint64))


def hash_strings(values: pa.Array, salt: int | np.ndarray) -> np.ndarray:
    """64-bit hashes of a string or binary array (null hashes like the empty string)."""
    large = pa.types.is_large_string(values.type) or pa.types.is_large_binary(values.type)
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], np.int64 if large else np.int32)[
        values.offset:values.offset + n + 1].astype(np.int64)
    data_buf = values.buffers()[2]
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.empty(0, np.uint8)
    lengths = np.diff(offsets)
    if values.null_count:
        lengths = np.where(to_numpy(values.is_null()), 0, lengths)
    return _hash_bytes(data, offsets[:-1], lengths, salt)


MASK64 = (1 << 64) - 1
# Up to this many bytes in all, Python's integers beat numpy's per-byte-position loop: one
# Criteo row's 26 values hash in 37 us against 62 before any cache hit (the loop was a served
# request's largest single cost, issue 27).
SMALL_BYTES = 1024
# Categorical values repeat (a served request's ids are mostly frequent ones): the small
# path remembers up to this many (salt, value) hashes, then starts afresh.
SMALL_CACHE = 1 << 16
_small_cache: dict[tuple[int, bytes], int] = {}


def _hash_small(values: list[bytes], salt: np.ndarray) -> np.ndarray:
    """_hash_bytes's result: FNV-1a on Python integers (modulo 2**64), `_mix` on the values not
    in the cache."""
    offset, prime, cache = int(FNV_OFFSET), int(FNV_PRIME), _small_cache
    keys = list(zip(salt.tolist(), values, strict=True))
    missing = [k for k in dict.fromkeys(keys) if k not in cache]
    if missing:
        fnv = []
        for value_salt, value in missing:
            h = offset ^ value_salt
            for byte in value:
                h = ((h ^ byte) * prime) & MASK64
            fnv.append(h ^ len(value))
        if len(cache) + len(missing) > SMALL_CACHE:
            cache.clear()
        with np.errstate(over="ignore"):
            cache.update(zip(missing, _mix(np.array(fnv, np.uint64)).tolist(), strict=True))
    return np.array([cache[k] for k in keys], np.uint64)


def hash_byte_strings(values: list[bytes], salt: np.ndarray) -> np.ndarray:
    """hash_strings for a few Python byte strings, one salt each (no Arrow round trip)."""
    salt = np.broadcast_to(np.asarray(salt, np.uint64), (len(values),))
    if sum(map(len, values)) <= SMALL_BYTES:
        return _hash_small(values, salt)
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    starts = np.zeros(len(values), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return _hash_bytes(np.frombuffer(b"".join(values), np.uint8), starts, lengths, salt)


def field_salt(field_name: str) -> int:
    # Not through pa.array: a list makes pyarrow import pandas, ~1 s of every process's start.
    return int(hash_byte_strings([field_name.encode()], np.zeros(1, np.uint64))[0])


def bucket_ids(hashes: np.ndarray, buckets: int | np.ndarray,
               offset: int | np.ndarray = 0) -> np.ndarray:
    """Embedding rows (int64) of hashes: `hash % buckets + offset`, the one formula every id
    path uses. `buckets` and `offset` are one per feature, broadcast against `hashes`."""
    ids = (hashes % np.asarray(buckets, np.uint64)).astype(np.int64)
    if np.any(offset):
        ids += offset
    return ids


def hash_to_buckets(column: pa.Array | pa.ChunkedArray, salt: int, buckets: int,
                    offset: int = 0) -> np.ndarray:
    """Ids (int64, see bucket_ids) for a string or dictionary-encoded string column.

    For dictionary columns only the distinct values are hashed, then gathered by index.
    """
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out = []
    for chunk in chunks:
        if pa.types.is_dictionary(chunk.type):
            table = bucket_ids(hash_strings(chunk.dictionary, salt), buckets, offset)
            if chunk.null_count:  # nulls hash like the empty string, stored at the end
                empty = bucket_ids(hash_byte_strings([b""], np.asarray(salt)), buckets, offset)
                table = np.append(table, empty)
                idx = pc.fill_null(chunk.indices, len(chunk.dictionary))
            else:
                idx = chunk.indices
            out.append(table[to_numpy(idx)])
        else:
            out.append(bucket_ids(hash_strings(chunk, salt), buckets, offset))
    return np.concatenate(out) if out else np.empty(0, np.int64)
