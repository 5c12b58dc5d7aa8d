"""Schema of the `dataset` group: where the rows are and how they become tensors."""

from dataclasses import dataclass, field
from enum import StrEnum

from omegaconf import MISSING

from recrunner.config.checks import at_least


class DataFormat(StrEnum):
    delimited = "delimited"  # raw rows: TSV/CSV laid out as dataset.schema.columns
    slot = "slot"  # PaddleRec lines: click:<y> dense_feature:<x>... <slot>:<id>... (ids hashed)
    criteo = "delimited"  # alias: the name configs and exports used before schemas


class OnError(StrEnum):
    skip = "skip"
    fail = "fail"


class DenseTransform(StrEnum):
    log = "log"  # log1p(max(x, 0))
    minmax = "minmax"  # (x - min) / (max - min), PaddleRec's scaling
    standardise = "standardise"  # (x - mean) / std
    none = "none"


class Pooling(StrEnum):
    sum = "sum"
    mean = "mean"


class Derive(StrEnum):
    """A categorical value computed from a YYMMDDHH column (Avazu's `hour`)."""

    hour_of_day = "hour_of_day"  # "00".."23": recurs every day, unlike the raw hour
    weekday = "weekday"  # "0" (Monday).."6"


@dataclass
class DenseFeature:
    name: str = MISSING
    column: str | None = None  # the file column (default: name)
    # The model input where the field is empty (after the transform; 0 as in PaddleRec).
    missing: float = 0.0
    transform: DenseTransform = DenseTransform.log
    min: float | None = None  # minmax
    max: float | None = None
    mean: float | None = None  # standardise
    std: float | None = None
    # Synthetic data only: lognormal location of the raw counts, share of empty fields,
    # share of rows shifted by -3 (small negatives, as Criteo's I2 has).
    synth_mu: float = 1.5
    synth_missing: float = 0.0
    synth_negative: float = 0.0


@dataclass
class SparseFeature:
    name: str = MISSING
    column: str | None = None  # the file column (default: name)
    # None: hashed into the common space of model.sparse_feature_number rows (salted by the
    # feature name); an int: a private range of that many rows.
    buckets: int | None = None
    # Use another feature's rows and salt (the same value gets the same id in both).
    table: str | None = None
    # Several values in one field, split by this separator (None: single-valued).
    multi_value: str | None = None
    max_len: int = 1  # multi-valued: values kept per row (the rest dropped), padded to it
    pooling: Pooling = Pooling.sum
    allow_empty: bool = True  # multi-valued: an empty field is a row of padding
    derive: Derive | None = None
    # Synthetic data only: distinct values and share of empty fields.
    synth_cardinality: int = 1000
    synth_missing: float = 0.0


@dataclass
class FileLayout:
    """Raw delimited files."""

    delimiter: str = "auto"  # "\t", "," ...; auto: tab if the first line has one, else comma
    header: str = "auto"  # "true" | "false" | "auto" (a first line naming the columns)


@dataclass
class SlotLayout:
    """PaddleRec slot lines: `<label_key>:<y> <dense_key>:<x>... <slot>:<id>...`."""

    label_key: str = "click"
    dense_key: str = "dense_feature"
    # One slot name per categorical feature, in order (None: "1", "2", ...).
    sparse_keys: list[str] | None = None


@dataclass
class SchemaConfig:
    """What the columns of a row are and how each becomes a model input."""

    name: str = MISSING
    label: str = "label"
    ignore: list[str] = field(default_factory=list)
    # Every column of a row, in file order (None: label, ignore, dense, then sparse columns).
    columns: list[str] | None = None
    dense: list[DenseFeature] = field(default_factory=list)
    sparse: list[SparseFeature] = field(default_factory=list)
    file: FileLayout = field(default_factory=FileLayout)
    slot: SlotLayout = field(default_factory=SlotLayout)

    def __post_init__(self) -> None:
        from recrunner.data.schema import validate_config

        validate_config(self)


@dataclass
class SynthConfig:
    """Synthetic rows of dataset.schema drawn from a known click model."""

    train_rows: int = 800_000
    test_rows: int = 100_000
    seed: int = 7
    base_ctr: float = 0.25


@dataclass
class SampleSetConfig:
    """Paddle Operator SampleSet caching the dataset on JuiceFS (used by cluster=k8s).

    With a name set, the PaddleJob mounts the cached data at `mount_path` (dataset.train and
    dataset.test must then lie below it); the SampleSet uses the JuiceFS Secret of
    cluster.juicefs as its cache engine.
    """

    name: str | None = None
    # Remote data as [NAME://]BUCKET[.ENDPOINT][/PREFIX] (juicesync syntax).
    source_uri: str = ""
    # Existing Secret with the source storage's credentials (empty: none needed).
    secret_ref: str = ""
    # Cache nodes.
    partitions: int = 1
    mount_path: str = "/mnt/sampleset"
    # One cache tier: medium MEM, SSD or HDD, its directory on the node, and its size.
    cache_medium: str = "MEM"
    cache_path: str = "/dev/shm/sampleset"
    cache_quota: str = "2Gi"
    # The data is already in the JuiceFS file system: skip the sync from source_uri.
    no_sync: bool = False
    # Cache only on nodes whose label <key> has one of the values.
    node_affinity: dict[str, list[str]] = field(default_factory=dict)
    # SampleJob submitted with it: warmup (preload the cache), sync (copy source_uri again), none.
    job: str = "warmup"


@dataclass
class DatasetConfig:
    name: str = MISSING
    # A path, glob, directory or fsspec URL; `.gz` is decompressed transparently.
    train: str = MISSING
    test: str = MISSING
    schema: SchemaConfig = MISSING
    format: DataFormat = DataFormat.delimited
    on_error: OnError = OnError.fail
    max_logged_errors: int = 5
    # Overrides every dense feature's transform (e.g. none for pre-scaled slot files).
    dense_transform: DenseTransform | None = None
    # Bytes read per block; rows are parsed a block at a time, so memory stays flat.
    block_bytes: int = 8 << 20
    # Blocks parsed concurrently (threads).
    parse_workers: int = 2
    # Parsed batches kept in memory after the first pass over a file spec, up to this many MiB
    # per process, so later epochs and evaluations skip reading and parsing (same batches, same
    # order). A spec larger than this is streamed every time; 0 never keeps any.
    cache_mib: int = 1024
    # Generate the files from `synth` when they are missing (the bundled default data).
    generate: bool = False
    synth: SynthConfig = field(default_factory=SynthConfig)
    sampleset: SampleSetConfig = field(default_factory=SampleSetConfig)

    def __post_init__(self) -> None:
        at_least("dataset", self, cache_mib=0)
