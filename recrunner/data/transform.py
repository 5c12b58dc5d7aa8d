"""Feature preprocessing shared by training, `recrun predict` and the server.

It is saved in every export, so serving applies exactly what training applied.
"""

from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from recrunner.data.hashing import field_salt, hash_byte_strings, hash_to_buckets

NUM_DENSE = 13
NUM_SPARSE = 26
DENSE_NAMES = [f"I{i}" for i in range(1, NUM_DENSE + 1)]
SPARSE_NAMES = [f"C{i}" for i in range(1, NUM_SPARSE + 1)]


@dataclass
class Preprocessor:
    num_buckets: int
    dense_transform: str = "log"
    dense_min: list[float] | None = None
    dense_max: list[float] | None = None

    def __post_init__(self) -> None:
        self._salts = np.array([field_salt(name) for name in SPARSE_NAMES], np.uint64)
        if self.dense_transform == "minmax":
            lo = np.asarray(self.dense_min, np.float32)
            span = np.asarray(self.dense_max, np.float32) - lo
            if lo.shape != (NUM_DENSE,) or span.shape != (NUM_DENSE,) or (span <= 0).any():
                raise ValueError("dataset.dense_min/dense_max need 13 values each, with max > min")
            self._lo, self._scale = lo, (1.0 / span).astype(np.float32)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Preprocessor":
        return cls(**data)

    def dense(self, raw: np.ndarray) -> np.ndarray:
        """Transform raw counts (float32 [N, 13], NaN where missing) in place.

        A missing value is 0 after the transform, as in PaddleRec's Criteo reader.
        """
        missing = np.isnan(raw)
        if self.dense_transform == "log":
            np.maximum(raw, 0.0, out=raw)
            np.log1p(raw, out=raw)
        elif self.dense_transform == "minmax":
            raw -= self._lo
            raw *= self._scale
        raw[missing] = 0.0
        return raw

    def sparse(self, columns: list[pa.Array | pa.ChunkedArray]) -> np.ndarray:
        """Hash the 26 categorical string columns into int64 bucket ids [N, 26]."""
        n = len(columns[0])
        out = np.empty((n, NUM_SPARSE), np.int64)
        for j, (col, salt) in enumerate(zip(columns, self._salts, strict=True)):
            out[:, j] = hash_to_buckets(col, salt, self.num_buckets)
        return out

    def sparse_from_bytes(self, values: list[bytes]) -> np.ndarray:
        """`sparse` for a few rows given as Python bytes, row-major (26 per row)."""
        n = len(values) // NUM_SPARSE
        hashed = hash_byte_strings(values, np.tile(self._salts, n))
        return (hashed % np.uint64(self.num_buckets)).astype(np.int64).reshape(n, NUM_SPARSE)
