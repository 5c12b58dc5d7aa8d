"""The DNN's config: the schema and, through its defaults, the model's default config.

From PaddleRec's models/rank/dnn/config.yaml: `sparse_feature_dim: 9`,
`fc_sizes: [512, 256, 128, 32]`, `sparse_feature_number: 1000001`, Adam at 0.001.
"""

from dataclasses import dataclass, field

from recrunner.config.checks import at_least, each_at_least, positive, within

from ..wide_cross import check_wide_crosses


@dataclass
class Config:
    name: str = "dnn"
    sparse_feature_number: int = 1_000_001
    sparse_feature_dim: int = 9
    fc_sizes: list[int] = field(default_factory=lambda: [512, 256, 128, 32])
    # Dropout after each hidden layer (PaddleRec's DNN has none).
    dropout: float = 0.0
    # L2 on the embedding rows each training batch looks up (dygraph modes; 0: none).
    embedding_l2: float = 0.0
    sparse_grad: bool = True
    init_scale: float = 0.01
    # The W&D paper's cross-product transformations (blocks.WideCrosses): pairs of
    # single-valued field names (e.g. [[C1, C2]]) whose id pair gets its own wide weight, hashed
    # into wide_cross_buckets rows of a second table whose Adam rate is the table rate times
    # wide_cross_lr_scale (mode=local and mode=collective; docs/models.md measures it).
    wide_crosses: list[list[str]] = field(default_factory=list)
    wide_cross_buckets: int = 1_000_003
    wide_cross_lr_scale: float = 1.0

    def __post_init__(self) -> None:
        check_wide_crosses(self)
        at_least("model", self, sparse_feature_number=1, sparse_feature_dim=1)
        each_at_least("model", self, "fc_sizes", 1)
        positive("model", self, "init_scale")
        at_least("model", self, embedding_l2=0.0)
        within("model", self, "dropout", 0.0, 0.99)
