"""The config fields the zoo's models share, with their checks: each model's `Config`
extends the layer that fits it and keeps its own defaults (and their sources) in its folder.

Each layer adds fields after its parent's, so a model's keys read: the table's, the
embedding's, the MLP's, then the model's own.
"""

from dataclasses import dataclass, field

from recrunner.config.checks import at_least, each_at_least, positive, within


@dataclass
class TableConfig:
    """The keys the runner reads from every model: the id table and its update."""

    name: str  # each model's Config defaults it to the model's name
    # One shared table for all sparse fields: ids are hashed into this many buckets.
    sparse_feature_number: int = 1_000_001
    # L2 on the embedding rows each training batch looks up (dygraph modes; 0: none).
    embedding_l2: float = 0.0
    # Sparse (SelectedRows) embedding gradients: with lazy Adam ~2.4x faster than dense.
    sparse_grad: bool = True
    init_scale: float = 0.01
    # runner.online: zero the rows no id has touched for this many passes (0: never); the
    # zeroed rows travel in the next version as deletions (recrunner.online.evict).
    evict_after_passes: int = 0

    def __post_init__(self) -> None:
        at_least("model", self, sparse_feature_number=1, evict_after_passes=0)
        positive("model", self, "init_scale")
        at_least("model", self, embedding_l2=0.0)


@dataclass
class EmbeddingConfig(TableConfig):
    """A model that looks up a latent vector of `sparse_feature_dim` per id."""

    sparse_feature_dim: int = 9

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("model", self, sparse_feature_dim=1)


@dataclass
class MlpConfig(EmbeddingConfig):
    """A model with an MLP of `fc_sizes` hidden layers (each model sets its own sizes)."""

    fc_sizes: list[int] = field(default_factory=lambda: [512, 256, 128, 32])

    def __post_init__(self) -> None:
        super().__post_init__()
        each_at_least("model", self, "fc_sizes", 1)


@dataclass
class MlpDropoutConfig(MlpConfig):
    """An MLP with dropout after each hidden layer (docs/models.md measures it)."""

    dropout: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        within("model", self, "dropout", 0.0, 0.99)
