"""The runtime feature layout: which columns a row has and where each feature lands in the
model's inputs. Built once from `dataset.schema` and `model.sparse_feature_number`, and saved as
a plain dict in every export (and in checkpoints' fingerprint), so serving applies exactly what
training applied.

Inputs: `dense` float32 [N, num_dense] (one column per dense feature, transformed) and `sparse`
int64 [N, sparse_width]: one column per single-valued categorical feature, `max_len` columns per
multi-valued one (its ids, then `pad_id`). Ids index one table of `table_rows` rows: the common
hashed space (model.sparse_feature_number rows, every feature salted by its name), then each
private range (`buckets: <int>`), then one padding row if any feature is multi-valued.
"""

from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from recrunner.config.dataset import (
    DataFormat,
    DatasetConfig,
    DenseTransform,
    SchemaConfig,
    SparseFeature,
)
from recrunner.data.hashing import field_salt

HEADER_CHOICES = ("true", "false", "auto")


def validate_config(cfg: SchemaConfig) -> None:
    """Reject what the dataclass types cannot: one line naming the key (runs at config load)."""
    key = "dataset.schema"
    if not cfg.label.strip():
        raise ValueError(f"{key}.label must name the label column")
    names_by_kind = {"dense": [d.name for d in cfg.dense], "sparse": [f.name for f in cfg.sparse]}
    for kind, declared in names_by_kind.items():
        for i, name in enumerate(declared):
            if not name.strip():
                raise ValueError(f"{key}.{kind}[{i}].name must not be empty")
    dense_names = [f.name for f in cfg.dense]
    names = dense_names + [f.name for f in cfg.sparse]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"{key}: feature name {dup!r} declared twice")
    for i, d in enumerate(cfg.dense):
        where = f"{key}.dense[{i}] ({d.name})"
        if d.transform == DenseTransform.minmax and (
                d.min is None or d.max is None or not d.max > d.min):
            raise ValueError(f"{where}: transform minmax needs min and max with max > min")
        if d.transform == DenseTransform.standardise and (
                d.mean is None or d.std is None or not d.std > 0):
            raise ValueError(f"{where}: transform standardise needs mean and std > 0")
        if not 0 <= d.synth_missing <= 1 or not 0 <= d.synth_negative <= 1:
            raise ValueError(f"{where}: synth_missing and synth_negative must be in [0, 1]")
    by_name = {s.name: s for s in cfg.sparse}
    for i, s in enumerate(cfg.sparse):
        where = f"{key}.sparse[{i}] ({s.name})"
        if s.buckets is not None and s.buckets < 1:
            raise ValueError(f"{where}.buckets must be >= 1 (or null: the common space)")
        if s.table is not None:
            owner = by_name.get(s.table)
            if owner is None or owner is s:
                raise ValueError(f"{where}.table: {s.table!r} is not another categorical feature")
            if owner.table is not None:
                raise ValueError(f"{where}.table: {s.table!r} itself shares {owner.table!r}'s "
                                 "table; name that one")
            if s.buckets is not None:
                raise ValueError(f"{where}: set buckets or table, not both")
        if s.max_len < 1:
            raise ValueError(f"{where}.max_len must be >= 1")
        if s.multi_value is None and s.max_len != 1:
            raise ValueError(f"{where}.max_len needs multi_value (a separator)")
        if s.multi_value == "":
            raise ValueError(f"{where}.multi_value must be a non-empty separator")
        if s.derive is not None and s.multi_value is not None:
            raise ValueError(f"{where}: a derived feature cannot be multi-valued")
        if s.synth_cardinality < 1 or not 0 <= s.synth_missing <= 1:
            raise ValueError(f"{where}: synth_cardinality must be >= 1, synth_missing in [0, 1]")
    if cfg.file.header.lower() not in HEADER_CHOICES:
        raise ValueError(f"{key}.file.header must be true, false or auto, got {cfg.file.header!r}")
    if cfg.file.delimiter != "auto" and len(cfg.file.delimiter) != 1:
        raise ValueError(f"{key}.file.delimiter must be one character or auto")
    if cfg.slot.sparse_keys is not None and len(cfg.slot.sparse_keys) != len(cfg.sparse):
        raise ValueError(f"{key}.slot.sparse_keys needs one key per categorical feature "
                         f"({len(cfg.sparse)})")
    both = {d.column or d.name for d in cfg.dense} & {s.column or s.name for s in cfg.sparse}
    if both:
        raise ValueError(f"{key}: column {sorted(both)[0]!r} is read by a dense and a categorical "
                         "feature; a column is either")
    columns = resolve_columns(cfg)
    used = {cfg.label, *cfg.ignore, *(d.column or d.name for d in cfg.dense),
            *(s.column or s.name for s in cfg.sparse)}
    dup = next((c for c in columns if columns.count(c) > 1), None)
    if dup is not None:
        raise ValueError(f"{key}.columns: {dup!r} listed twice")
    missing = next((c for c in sorted(used) if c not in columns), None)
    if missing is not None:
        raise ValueError(f"{key}.columns lacks {missing!r} (the label, an ignored column or a "
                         "feature's column)")
    unused = next((c for c in columns if c not in used), None)
    if unused is not None:
        raise ValueError(f"{key}.columns: {unused!r} is neither the label, a feature's column nor "
                         "in ignore")


def resolve_columns(cfg: SchemaConfig) -> list[str]:
    """The file's columns in order: declared, or label, ignored, dense, then sparse columns."""
    if cfg.columns is not None:
        return list(cfg.columns)
    out = [cfg.label, *cfg.ignore]
    for col in [d.column or d.name for d in cfg.dense] + [s.column or s.name for s in cfg.sparse]:
        if col not in out:
            out.append(col)
    return out


@dataclass(frozen=True)
class Dense:
    name: str
    column: str
    transform: str
    missing: float
    params: dict[str, float]  # min/max or mean/std


@dataclass(frozen=True)
class Field:
    """One categorical feature and the columns/rows it occupies."""

    name: str
    column: str
    width: int  # columns in the id matrix: 1, or max_len when multi-valued
    pooling: str
    salt_name: str  # the table owner's name: shared tables share the salt
    buckets: int  # rows its values hash into ...
    offset: int  # ... starting at this row
    multi_value: str | None = None
    allow_empty: bool = True
    derive: str | None = None

    @cached_property
    def salt(self) -> int:
        return field_salt(self.salt_name)


@dataclass
class Schema:
    label: str
    columns: list[str]
    dense: list[Dense]
    fields: list[Field]
    table_rows: int
    pad_id: int | None
    kind: str = "delimited"  # delimited | slot
    delimiter: str = "auto"
    header: str = "auto"
    slot_keys: dict[str, Any] = field(default_factory=dict)  # label, dense, sparse keys

    def __post_init__(self) -> None:
        self.dense = [d if isinstance(d, Dense) else Dense(**d) for d in self.dense]
        self.fields = [f if isinstance(f, Field) else Field(**f) for f in self.fields]
        # Per-column transform constants, computed as float32 like the scaling always was.
        n = len(self.dense)
        self._sub = np.zeros(n, np.float32)
        self._mul = np.ones(n, np.float32)
        for j, d in enumerate(self.dense):
            if d.transform == "minmax":
                lo = np.float32(d.params["min"])
                self._sub[j] = lo
                self._mul[j] = np.float32(1.0) / (np.float32(d.params["max"]) - lo)
            elif d.transform == "standardise":
                self._sub[j] = d.params["mean"]
                self._mul[j] = np.float32(1.0) / np.float32(d.params["std"])
        self._log = np.array([d.transform == "log" for d in self.dense], bool)
        self._affine = np.array([d.transform in ("minmax", "standardise") for d in self.dense],
                                bool)
        self._missing = np.array([d.missing for d in self.dense], np.float32)

    # --- shape ---------------------------------------------------------------------------
    @property
    def num_dense(self) -> int:
        return len(self.dense)

    @property
    def dense_names(self) -> list[str]:
        return [d.name for d in self.dense]

    @property
    def sparse_width(self) -> int:
        return sum(f.width for f in self.fields)

    @property
    def is_plain(self) -> bool:
        """Every categorical feature is one column's value as is (hashed without splitting)."""
        return all(f.width == 1 and f.multi_value is None and f.derive is None
                   for f in self.fields)

    def names(self, labeled: bool) -> list[str]:
        """The columns a row has (labeled rows carry the label column, unlabeled ones do not)."""
        return [c for c in self.columns if labeled or c != self.label]

    # --- (de)serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "columns": list(self.columns),
                "dense": [asdict(d) for d in self.dense],
                "fields": [asdict(f) for f in self.fields], "table_rows": self.table_rows,
                "pad_id": self.pad_id, "kind": self.kind, "delimiter": self.delimiter,
                "header": self.header, "slot_keys": dict(self.slot_keys)}

    def fingerprint(self) -> dict[str, Any]:
        """What a trained model depends on (not the file layout it was read from)."""
        data = self.to_dict()
        return {k: data[k] for k in ("dense", "fields", "table_rows", "pad_id")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Schema":
        return cls(**data)

    @classmethod
    def from_config(cls, cfg: SchemaConfig, common_buckets: int,
                    kind: DataFormat | str = DataFormat.delimited,
                    dense_transform: DenseTransform | str | None = None) -> "Schema":
        dense = []
        for d in cfg.dense:
            transform = str(dense_transform or d.transform)
            params = {k: float(v) for k, v in (("min", d.min), ("max", d.max), ("mean", d.mean),
                                               ("std", d.std)) if v is not None}
            if transform == "minmax" and not {"min", "max"} <= params.keys():
                raise ValueError(f"dataset.dense_transform=minmax needs min and max on dense "
                                 f"feature {d.name}")
            if transform == "standardise" and not {"mean", "std"} <= params.keys():
                raise ValueError(f"dataset.dense_transform=standardise needs mean and std on "
                                 f"dense feature {d.name}")
            dense.append(Dense(d.name, d.column or d.name, transform, float(d.missing), params))
        uses_common = any(s.buckets is None and s.table is None for s in cfg.sparse)
        offset = common_buckets if uses_common else 0
        ranges: dict[str, tuple[int, int]] = {}  # owner name -> (offset, rows)
        for s in cfg.sparse:
            if s.table is None:
                if s.buckets is None:
                    ranges[s.name] = (0, common_buckets)
                else:
                    ranges[s.name] = (offset, s.buckets)
                    offset += s.buckets
        multi = any(s.multi_value is not None for s in cfg.sparse)
        pad_id = offset if multi else None
        fields = [_field(s, ranges) for s in cfg.sparse]
        kind = str(DataFormat[kind] if kind == "criteo" else DataFormat(kind))
        if kind == "slot" and multi:
            raise ValueError("dataset.format=slot reads single-valued features only; "
                             f"{next(s.name for s in cfg.sparse if s.multi_value)} is multi-valued")
        slot_keys = {"label": cfg.slot.label_key, "dense": cfg.slot.dense_key,
                     "sparse": list(cfg.slot.sparse_keys or
                                    [str(i) for i in range(1, len(cfg.sparse) + 1)])}
        return cls(cfg.label, resolve_columns(cfg), dense, fields, offset + multi, pad_id, kind,
                   cfg.file.delimiter, cfg.file.header.lower(), slot_keys)

    # --- preprocessing -------------------------------------------------------------------
    def transform_dense(self, raw: np.ndarray) -> np.ndarray:
        """Transform raw values (float32 [N, num_dense], NaN where missing) in place; a missing
        value becomes the feature's `missing` (0 by default, as in PaddleRec's reader)."""
        missing = np.isnan(raw)
        if self._log.all():  # the common case, whole-matrix ufuncs
            np.maximum(raw, 0.0, out=raw)
            np.log1p(raw, out=raw)
        elif self._log.any():
            cols = raw[:, self._log]
            np.maximum(cols, 0.0, out=cols)
            np.log1p(cols, out=cols)
            raw[:, self._log] = cols
        if self._affine.any():
            raw -= self._sub
            raw *= self._mul
        if self._missing.any():
            np.copyto(raw, np.broadcast_to(self._missing, raw.shape), where=missing)
        else:
            raw[missing] = 0.0
        return raw


def _field(s: SparseFeature, ranges: dict[str, tuple[int, int]]) -> Field:
    owner = s.table or s.name
    offset, rows = ranges[owner]
    width = s.max_len if s.multi_value is not None else 1
    return Field(s.name, s.column or s.name, width, str(s.pooling), owner, rows, offset,
                 s.multi_value, s.allow_empty, str(s.derive) if s.derive else None)


def schema_for(cfg: DatasetConfig, sparse_feature_number: int) -> Schema:
    """The runtime schema of a dataset config for a model with that common hashed space."""
    return Schema.from_config(cfg.schema, sparse_feature_number, cfg.format, cfg.dense_transform)


def load_schema_config(name_or_path: str | Path) -> SchemaConfig:
    """A bundled schema (conf/dataset/schema/<name>.yaml) or a YAML file, validated."""
    from omegaconf import OmegaConf

    from recrunner import CONF_DIR

    path = Path(name_or_path)
    if not path.suffix:
        path = Path(CONF_DIR) / "dataset" / "schema" / f"{name_or_path}.yaml"
    merged = OmegaConf.merge(OmegaConf.structured(SchemaConfig), OmegaConf.load(path))
    return OmegaConf.to_object(merged)  # type: ignore[return-value]
