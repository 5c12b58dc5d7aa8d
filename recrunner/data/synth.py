"""Synthetic Criteo-shaped data from a known click model (the bundled default dataset).

Rows look like Kaggle Criteo: 13 heavy-tailed integer counts with gaps, 26 categorical fields
of 8-hex-digit values, Zipf-distributed with Criteo-like cardinalities. The click probability
is a fixed function of the raw values (per-category weights, log-count weights and two
pairwise interactions), so a model's predictions can be compared with the truth, written
beside each file as `<file>.truth.npy` (float32, one probability per row).
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from recrunner.data.transform import DENSE_NAMES, SPARSE_NAMES

# Kaggle Criteo's distinct values per categorical field, capped to keep tables small.
CARDINALITY = [1460, 583, 1_000_000, 1_000_000, 305, 24, 12517, 633, 3, 93145, 5683,
               1_000_000, 3194, 27, 14992, 1_000_000, 10, 5652, 2173, 4, 1_000_000, 18, 15,
               286181, 105, 142572]
CAT_MISSING = [0.0] * 18 + [0.44, 0.44, 0.0, 0.76, 0.0, 0.04, 0.44, 0.44]
DENSE_MISSING = [0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.22]
DENSE_MU = [0.5, 1.5, 1.8, 1.6, 7.5, 3.5, 1.5, 2.5, 3.8, 0.3, 1.0, 0.3, 1.8]
CHUNK_ROWS = 100_000
HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) * np.uint64(1)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _unit(x: np.ndarray) -> np.ndarray:
    return (_splitmix(x) >> np.uint64(11)).astype(np.float64) / float(1 << 53)


@dataclass
class ClickModel:
    """The ground truth: weights are hashes of (seed, field, category), nothing is stored."""

    seed: int
    base_ctr: float

    def __post_init__(self) -> None:
        rng = np.random.default_rng([self.seed, 0])
        self.field_scale = rng.uniform(0.1, 0.9, len(CARDINALITY)) * (rng.random(26) < 0.7)
        self.dense_weight = rng.normal(0.0, 0.25, len(DENSE_NAMES))
        self.zipf_s = rng.uniform(1.05, 1.3, len(CARDINALITY))
        self.bias = 0.0
        calib = self.sample(np.random.default_rng([self.seed, 1]), 50_000)
        logits = self.logits(*calib)
        lo, hi = -10.0, 10.0
        for _ in range(60):  # bisect the bias so the mean CTR is base_ctr
            self.bias = (lo + hi) / 2
            ctr = (1 / (1 + np.exp(-(logits + self.bias)))).mean()
            lo, hi = (self.bias, hi) if ctr < self.base_ctr else (lo, self.bias)

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw counts (float, NaN = missing) [n, 13] and category indices (-1 = missing) [n, 26]."""
        counts = np.floor(rng.lognormal(DENSE_MU, 1.2, (n, len(DENSE_MU))))
        counts[:, 1] -= 3 * (rng.random(n) < 0.1)  # I2 has small negatives, as in Criteo
        counts[rng.random(counts.shape) < DENSE_MISSING] = np.nan
        cats = np.empty((n, len(CARDINALITY)), np.int64)
        for j, (card, s) in enumerate(zip(CARDINALITY, self.zipf_s, strict=True)):
            # Inverse-CDF sampling of a truncated power law over the field's categories.
            u = rng.random(n)
            x = ((card + 1) ** (1 - s) - 1) * u + 1
            cats[:, j] = np.minimum(np.floor(x ** (1 / (1 - s))) - 1, card - 1)
        cats[rng.random(cats.shape) < CAT_MISSING] = -1
        return counts, cats

    def _weight(self, field: int, cats: np.ndarray) -> np.ndarray:
        key = (cats.astype(np.uint64) + np.uint64(1)) * np.uint64(1_000_003) + np.uint64(
            self.seed * 131 + field)
        u1, u2 = _unit(key), _unit(key ^ np.uint64(0xABCDEF))
        return np.sqrt(-2 * np.log(u1 + 1e-12)) * np.cos(2 * np.pi * u2)  # Box-Muller

    def logits(self, counts: np.ndarray, cats: np.ndarray) -> np.ndarray:
        z = np.full(len(cats), self.bias)
        z += np.nan_to_num(np.log1p(np.maximum(counts, 0)) - 1.5) @ self.dense_weight
        for j, scale in enumerate(self.field_scale):
            if scale:
                z += scale * self._weight(j, cats[:, j])
        # Interactions a linear model cannot express: the deep part has to find them.
        z += 0.8 * self._weight(100, cats[:, 0] * 1000 + cats[:, 1] % 1000)
        z += 0.6 * np.tanh(np.nan_to_num(np.log1p(np.maximum(counts[:, 4], 0))) - 7.5) * (
            self._weight(101, cats[:, 5]))
        return z

    def category_strings(self, field: int, cats: np.ndarray) -> pa.Array:
        key = _splitmix(cats.astype(np.uint64) * np.uint64(97) + np.uint64(field)) & np.uint64(
            0xFFFFFFFF)
        shifts = np.arange(28, -1, -4, dtype=np.uint64)
        digits = HEX[((key[:, None] >> shifts) & np.uint64(15)).astype(np.intp)]
        text = pa.array(digits.view("S8").ravel(), pa.binary()).cast(pa.string())
        return pa.compute.if_else(pa.array(cats < 0), pa.scalar(None, pa.string()), text)


def generate(path: str | Path, rows: int, seed: int, split: int, base_ctr: float = 0.25) -> None:
    """Write `rows` labeled TSV rows to `path` (and `<path>.truth.npy`), atomically."""
    import pyarrow.compute  # noqa: F401  (registers pa.compute)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = ClickModel(seed, base_ctr)
    truth = np.empty(rows, np.float32)
    tmp = path.with_name(path.name + ".tmp")
    options = pacsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    with pa.OSFile(str(tmp), "wb") as sink:
        for start in range(0, rows, CHUNK_ROWS):
            n = min(CHUNK_ROWS, rows - start)
            rng = np.random.default_rng([seed, 2 + split, start // CHUNK_ROWS])
            counts, cats = model.sample(rng, n)
            p = 1 / (1 + np.exp(-model.logits(counts, cats)))
            truth[start:start + n] = p
            columns = {"label": pa.array((rng.random(n) < p).astype(np.int8))}
            for j, name in enumerate(DENSE_NAMES):
                col = counts[:, j]
                columns[name] = pa.array(np.nan_to_num(col).astype(np.int64), mask=np.isnan(col))
            for j, name in enumerate(SPARSE_NAMES):
                columns[name] = model.category_strings(j, cats[:, j])
            pacsv.write_csv(pa.table(columns), sink, options)
    np.save(str(path) + ".truth.npy", truth)
    tmp.rename(path)


def truth_path(data_path: str) -> Path:
    return Path(data_path + ".truth.npy")
