"""DCN-V2's config: the schema and, through its defaults, the model's default config.

From PaddleRec's models/rank/dcn_v2/config.yaml: the stacked structure (`is_Stacked: True`),
`cross_num: 2`, full-rank cross layers (`use_low_rank_mixture: False`). The paper (Wang et al.
2021, section 6) finds stacked and parallel close on Criteo; low rank (`low_rank` > 0, the
paper's W = U V^T) trades a little AUC for speed. PaddleRec's `fc_sizes: [768, 768]` and
`sparse_feature_dim: 40` are for the full Criteo on a GPU; the defaults here are sized for the
default data on a CPU (docs/models.md measures them).
"""

from dataclasses import dataclass, field
from enum import StrEnum

from recrunner.config.checks import at_least, each_at_least, positive, within

from ..wide_cross import check_wide_crosses


class Structure(StrEnum):
    stacked = "stacked"  # cross network, then the MLP on its output
    parallel = "parallel"  # cross network and MLP side by side on the embeddings


@dataclass
class Config:
    name: str = "dcn_v2"
    sparse_feature_number: int = 1_000_001
    sparse_feature_dim: int = 9
    fc_sizes: list[int] = field(default_factory=lambda: [512, 256, 128])
    cross_num: int = 2
    structure: Structure = Structure.stacked
    # 0: full-rank cross weights (D x D); r > 0: W = U V^T with U, V of D x r.
    low_rank: int = 0
    # Dropout after each hidden layer of the MLP (PaddleRec: 0.5; see docs/models.md).
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
        at_least("model", self, sparse_feature_number=1, sparse_feature_dim=1, cross_num=1,
                 low_rank=0)
        each_at_least("model", self, "fc_sizes", 1)
        positive("model", self, "init_scale")
        at_least("model", self, embedding_l2=0.0)
        within("model", self, "dropout", 0.0, 0.99)
