"""numpy arrays to and from fixed-width Arrow arrays, without pyarrow's pandas shim.

pyarrow's `Array.to_numpy` and `pa.array(numpy_array)` consult its pandas shim first, which
imports pandas: 0.5-0.6 CPU-seconds of every process that reads a data file or a saved table
(each local run, PS trainer and PS export), for buffers both sides lay out the same way. These
two functions hand the buffers over directly (pyarrow's documented `buffers` /
`from_buffers`), and give what `to_numpy(zero_copy_only=False)` gives.
"""

import numpy as np
import pyarrow as pa


def to_numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an integer, floating or boolean array (chunks joined). Nulls become NaN
    (an integer array with nulls comes back as float64); a boolean array may hold none. A view
    of Arrow's buffer (read-only) when there is one chunk and no null."""
    if isinstance(values, pa.ChunkedArray):
        parts = [to_numpy(chunk) for chunk in values.chunks]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else _empty(values.type)
    n, start = len(values), values.offset
    if n == 0:
        return _empty(values.type)
    if pa.types.is_boolean(values.type):
        if values.null_count:
            raise ValueError("a boolean array with nulls has no numpy equivalent")
        return _bits(values.buffers()[1], start, n)
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise TypeError(f"not a number array: {values.type}")
    dtype = np.dtype(values.type.to_pandas_dtype())
    out = np.frombuffer(values.buffers()[1], dtype, n, start * dtype.itemsize)
    if values.null_count:
        out = out.astype(np.float64 if dtype.kind in "iu" else dtype)
        out[~_bits(values.buffers()[0], start, n)] = np.nan
    return out


def from_numpy(values: np.ndarray) -> pa.Array:
    """A 1-D numeric or boolean numpy array as an Arrow array without nulls (numbers share
    the numpy array's memory)."""
    values = np.ascontiguousarray(values)
    if values.ndim != 1:
        raise ValueError(f"a 1-D array is needed, not {values.ndim}-D")
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [None, pa.py_buffer(values)])


def _bits(buffer: pa.Buffer, start: int, n: int) -> np.ndarray:
    """Arrow's bit-packed booleans (least significant bit first) as a bool array."""
    skip = start % 8
    packed = np.frombuffer(buffer, np.uint8)[start // 8:(start + n + 7) // 8]
    return np.unpackbits(packed, bitorder="little")[skip:skip + n].astype(bool)


def _empty(kind: pa.DataType) -> np.ndarray:
    return np.empty(0, bool if pa.types.is_boolean(kind) else np.dtype(kind.to_pandas_dtype()))
