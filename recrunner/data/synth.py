"""Synthetic rows of any declared schema from a known click model (the bundled default data).

Dense features are heavy-tailed integer counts with gaps (lognormal, per-feature location and
missing rate); categorical features are Zipf-distributed over `synth_cardinality` values written
as 8 hex digits (multi-valued ones as lists of 0..max_len+2 values, derived ones as the YYMMDDHH
source column, later days for the test split, as in Avazu). The click probability is a fixed
function of the raw values (per-category weights, log-count weights and two pairwise
interactions), so a model's predictions can be compared with the truth, written beside each
file as `<file>.truth.npy` (float32, one probability per row). With Criteo's schema (its
cardinalities and missing rates as hints) the files are Criteo-shaped.
"""

import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from recrunner import atomic
from recrunner.config.dataset import SchemaConfig
from recrunner.data.schema import load_schema_config, resolve_columns

CHUNK_ROWS = 100_000
HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
# Derived (YYMMDDHH) columns: training rows fall on the first TRAIN_DAYS days, the test split
# on the day after, so raw hours never recur between them.
FIRST_DAY = datetime.date(2014, 10, 21)
TRAIN_DAYS = 10


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
    """The ground truth: weights are hashes of (seed, feature, category), nothing is stored."""

    schema: SchemaConfig
    seed: int
    base_ctr: float

    def __post_init__(self) -> None:
        dense, sparse = self.schema.dense, self.schema.sparse
        self.mu = np.array([d.synth_mu for d in dense])
        self.single = [j for j, f in enumerate(sparse) if f.multi_value is None]
        names = [f.name for f in sparse]
        self.vocab = [names.index(f.table) if f.table else j for j, f in enumerate(sparse)]
        self.draw(np.random.default_rng([self.seed, 0]))
        # After draw(), which may move the schema's hints (benchmarks/quality_suite.py).
        dense, sparse = self.schema.dense, self.schema.sparse
        self.dense_missing = np.array([d.synth_missing for d in dense])
        self.cat_missing = np.array([0.0 if sparse[j].derive else sparse[j].synth_missing
                                     for j in self.single])
        self.bias = 0.0
        calib = self.sample(np.random.default_rng([self.seed, 1]), 50_000, 0)
        logits = self.logits(*calib[:2])
        lo, hi = -10.0, 10.0
        for _ in range(60):  # bisect the bias so the mean CTR is base_ctr
            self.bias = (lo + hi) / 2
            ctr = (1 / (1 + np.exp(-(logits + self.bias)))).mean()
            lo, hi = (self.bias, hi) if ctr < self.base_ctr else (lo, self.bias)

    def draw(self, rng: np.random.Generator) -> None:
        """The model's random parameters (benchmarks/quality_suite.py draws a family)."""
        n = len(self.schema.sparse)
        self.field_scale = rng.uniform(0.1, 0.9, n) * (rng.random(n) < 0.7)
        self.dense_weight = rng.normal(0.0, 0.25, len(self.schema.dense))
        self.zipf_s = rng.uniform(1.05, 1.3, n)

    def _zipf(self, rng: np.random.Generator, j: int, shape: tuple[int, ...]) -> np.ndarray:
        # Inverse-CDF sampling of a truncated power law over the feature's categories.
        card, s = self.schema.sparse[j].synth_cardinality, self.zipf_s[j]
        x = ((card + 1) ** (1 - s) - 1) * rng.random(shape) + 1
        return np.minimum(np.floor(x ** (1 / (1 - s))) - 1, card - 1).astype(np.int64)

    def sample(self, rng: np.random.Generator, n: int, split: int
               ) -> tuple[np.ndarray, list[np.ndarray], dict[str, pa.Array]]:
        """Raw counts (float, NaN = missing) [n, num_dense]; per categorical feature its
        category indices (-1 = missing): [n], or [n, max_len + 2] for a multi-valued one; the
        YYMMDDHH strings of derived features' source columns."""
        sparse = self.schema.sparse
        counts = np.floor(rng.lognormal(self.mu, 1.2, (n, len(self.mu))))
        for j, d in enumerate(self.schema.dense):
            if d.synth_negative:  # small negatives, as Criteo's I2 has
                counts[:, j] -= 3 * (rng.random(n) < d.synth_negative)
        counts[rng.random(counts.shape) < self.dense_missing] = np.nan
        cats: list[np.ndarray] = [np.empty(0, np.int64)] * len(sparse)
        times: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        single = np.empty((n, len(self.single)), np.int64)
        for k, j in enumerate(self.single):
            f = sparse[j]
            if f.derive is None:
                single[:, k] = self._zipf(rng, j, (n,))
                continue
            column = f.column or f.name
            if column not in times:
                days = TRAIN_DAYS if split == 0 else 1
                times[column] = (split * TRAIN_DAYS + rng.integers(0, days, n),
                                 rng.integers(0, 24, n))
            day, hour = times[column]
            weekday = (FIRST_DAY.weekday() + day) % 7
            single[:, k] = hour if f.derive == "hour_of_day" else weekday
        single[rng.random(single.shape) < self.cat_missing] = -1
        for k, j in enumerate(self.single):
            cats[j] = single[:, k]
        for j, f in enumerate(sparse):
            if f.multi_value is not None:
                values = self._zipf(rng, j, (n, f.max_len + 2))
                length = rng.integers(0 if f.allow_empty else 1, f.max_len + 3, n)
                values[np.arange(f.max_len + 2) >= length[:, None]] = -1
                cats[j] = values
        return counts, cats, {c: _yymmddhh(*t) for c, t in times.items()}

    def _weight(self, field: int, cats: np.ndarray) -> np.ndarray:
        key = (cats.astype(np.uint64) + np.uint64(1)) * np.uint64(1_000_003) + np.uint64(
            self.seed * 131 + field)
        u1, u2 = _unit(key), _unit(key ^ np.uint64(0xABCDEF))
        return np.sqrt(-2 * np.log(u1 + 1e-12)) * np.cos(2 * np.pi * u2)  # Box-Muller

    def logits(self, counts: np.ndarray, cats: list[np.ndarray]) -> np.ndarray:
        z = np.full(len(counts), self.bias)
        z += np.nan_to_num(np.log1p(np.maximum(counts, 0)) - 1.5) @ self.dense_weight
        for j, scale in enumerate(self.field_scale):
            if not scale:
                continue
            # A field on another's table (`table`) is written in its owner's vocabulary: a
            # value weighs what it weighs there (a model shares one row for both).
            owner = self.vocab[j]
            if cats[j].ndim == 1:
                z += scale * self._weight(owner, cats[j])
            else:  # multi-valued: the values a model sees (max_len), pooled as declared
                f = self.schema.sparse[j]
                seen = cats[j][:, :f.max_len]
                w = np.where(seen >= 0, self._weight(owner, seen), 0.0).sum(axis=1)
                if f.pooling == "mean":
                    w /= np.maximum((seen >= 0).sum(axis=1), 1)
                z += scale * w
        self.add_interactions(z, counts, cats)
        return z

    def add_interactions(self, z: np.ndarray, counts: np.ndarray, cats: list[np.ndarray]
                         ) -> None:
        """Add to the logits `z` the terms a linear model cannot express: the deep part has to
        find them. The first two single-valued features, and the dense feature with the
        largest counts with the sixth single-valued feature (or the last)."""
        single = [cats[j] for j in self.single]
        if len(single) >= 2:
            z += 0.8 * self._weight(100, single[0] * 1000 + single[1] % 1000)
        if len(self.mu) and single:
            k = int(np.argmax(self.mu))
            z += 0.6 * np.tanh(np.nan_to_num(np.log1p(np.maximum(counts[:, k], 0))) -
                               self.mu[k]) * self._weight(101, single[min(5, len(single) - 1)])

    def category_strings(self, field: int, cats: np.ndarray) -> pa.Array:
        key = _splitmix(cats.astype(np.uint64) * np.uint64(97) + np.uint64(field)) & np.uint64(
            0xFFFFFFFF)
        shifts = np.arange(28, -1, -4, dtype=np.uint64)
        digits = HEX[((key[:, None] >> shifts) & np.uint64(15)).astype(np.intp)]
        text = pa.array(digits.view("S8").ravel(), pa.binary()).cast(pa.string())
        return pc.if_else(pa.array(cats < 0), pa.scalar(None, pa.string()), text)

    def multi_strings(self, field: int, cats: np.ndarray, sep: str) -> pa.Array:
        """Rows of [n, L] category indices (-1 = absent, at the end) as `a<sep>b...` strings."""
        present = cats >= 0
        offsets = np.concatenate([[0], np.cumsum(present.sum(axis=1))]).astype(np.int32)
        values = self.category_strings(field, cats[present])
        return pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), values), sep)


def _yymmddhh(day: np.ndarray, hour: np.ndarray) -> pa.Array:
    dates = np.array([(FIRST_DAY + datetime.timedelta(int(d))).strftime("%y%m%d")
                      for d in range(int(day.max(initial=0)) + 1)], "S6")
    hours = np.array([f"{h:02d}" for h in range(24)], "S2")
    return pa.array(np.char.add(dates[day], hours[hour]), pa.binary()).cast(pa.string())


@dataclass
class Chunk:
    """Up to CHUNK_ROWS rows of a split as ClickModel draws them, from row `start` on."""

    start: int
    counts: np.ndarray
    cats: list[np.ndarray]
    times: dict[str, pa.Array]
    truth: np.ndarray  # the click probability of each row
    clicks: np.ndarray  # bool: the labels drawn from it


def draw(model: ClickModel, seed: int, rows: int, split: int) -> Iterator[Chunk]:
    """The first `rows` rows of `split` (0: train, 1: test), the rows `generate` writes; each
    chunk's random numbers are seeded by its position, so a chunk does not depend on others."""
    for start in range(0, rows, CHUNK_ROWS):
        n = min(CHUNK_ROWS, rows - start)
        rng = np.random.default_rng([seed, 2 + split, start // CHUNK_ROWS])
        counts, cats, times = model.sample(rng, n, split)
        p = 1 / (1 + np.exp(-model.logits(counts, cats)))
        yield Chunk(start, counts, cats, times, p, rng.random(n) < p)


def generate(path: str | Path, rows: int, seed: int, split: int, base_ctr: float = 0.25,
             schema: SchemaConfig | None = None, model: ClickModel | None = None) -> None:
    """Write `rows` labeled rows of `schema` (default: Criteo's) to `path` and
    `<path>.truth.npy`, atomically. CSV files get a header line, TSV files none (as Avazu's
    and Criteo's own files). `model`: another click model of the schema (default: ClickModel
    of `seed` and `base_ctr`)."""
    schema = model.schema if model is not None else schema or load_schema_config("criteo")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = model or ClickModel(schema, seed, base_ctr)
    delimiter = "\t" if schema.file.delimiter == "auto" else schema.file.delimiter
    header = schema.file.header.lower() == "true" or (
        schema.file.header.lower() == "auto" and delimiter != "\t")
    columns = resolve_columns(schema)
    truth = np.empty(rows, np.float32)
    options = pacsv.WriteOptions(include_header=False, delimiter=delimiter, quoting_style="none")
    with atomic.writing(path, "data") as tmp, pa.OSFile(str(tmp), "wb") as sink:
        if header:
            sink.write((delimiter.join(columns) + "\n").encode())
        for chunk in draw(model, seed, rows, split):
            start, n, counts, cats = chunk.start, len(chunk.truth), chunk.counts, chunk.cats
            truth[start:start + n] = chunk.truth
            data = {schema.label: pa.array(chunk.clicks.astype(np.int8)), **chunk.times}
            for name in schema.ignore:  # e.g. a row id
                data[name] = pa.array(_splitmix(np.arange(start, start + n, dtype=np.uint64)
                                                + np.uint64(split << 40)))
            for j, d in enumerate(schema.dense):
                col = counts[:, j]
                data[d.column or d.name] = pa.array(np.nan_to_num(col).astype(np.int64),
                                                    mask=np.isnan(col))
            for j, f in enumerate(schema.sparse):
                if f.derive is None:  # a shared table shares its owner's vocabulary
                    vocab = model.vocab[j]
                    data[f.column or f.name] = (
                        model.category_strings(vocab, cats[j]) if f.multi_value is None
                        else model.multi_strings(vocab, cats[j], f.multi_value))
            pacsv.write_csv(pa.table({c: data[c] for c in columns}), sink, options)
        # The truth before the rows: a data file in place always has its truth.
        with atomic.writing(str(path) + ".truth.npy", "data") as truth_tmp, \
                open(truth_tmp, "wb") as fh:
            np.save(fh, truth)


def truth_path(data_path: str) -> Path:
    return Path(data_path + ".truth.npy")
