"""Schema of the `dataset` group: where the rows are and how they become tensors."""

from dataclasses import dataclass, field
from enum import StrEnum

from omegaconf import MISSING

# PaddleRec's Criteo min-max constants (its criteo reader's cont_min_ / cont_diff_).
PADDLEREC_DENSE_MIN = [0.0, -3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
PADDLEREC_DENSE_MAX = [20.0, 600.0, 100.0, 50.0, 64000.0, 500.0, 100.0, 50.0, 500.0, 10.0, 10.0,
                       10.0, 50.0]


class DataFormat(StrEnum):
    criteo = "criteo"  # raw Kaggle rows: label, I1..I13, C1..C26 (TSV, or CSV with a header)
    slot = "slot"  # PaddleRec lines: click:<y> dense_feature:<x> x13 1:<id> .. 26:<id>


class OnError(StrEnum):
    skip = "skip"
    fail = "fail"


class DenseTransform(StrEnum):
    log = "log"  # log1p(max(x, 0))
    minmax = "minmax"  # (x - min) / (max - min), PaddleRec's scaling
    none = "none"


@dataclass
class SynthConfig:
    """Synthetic Criteo-shaped data drawn from a known click model."""

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
    format: DataFormat = DataFormat.criteo
    on_error: OnError = OnError.fail
    max_logged_errors: int = 5
    dense_transform: DenseTransform = DenseTransform.log
    dense_min: list[float] = field(default_factory=lambda: list(PADDLEREC_DENSE_MIN))
    dense_max: list[float] = field(default_factory=lambda: list(PADDLEREC_DENSE_MAX))
    # Bytes read per block; rows are parsed a block at a time, so memory stays flat.
    block_bytes: int = 8 << 20
    # Blocks parsed concurrently (threads).
    parse_workers: int = 2
    # Generate the files from `synth` when they are missing (the bundled default data).
    generate: bool = False
    synth: SynthConfig = field(default_factory=SynthConfig)
    sampleset: SampleSetConfig = field(default_factory=SampleSetConfig)
