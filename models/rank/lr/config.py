"""LR's config: the schema and, through its defaults, the model's default config.

From PaddleRec's models/rank/logistic_regression/config.yaml: one weight per hashed id
(`sparse_feature_number`; PaddleRec's 1086460 is its Criteo vocabulary, here the common hashed
space of the other models) plus one per dense feature, Adam at 0.001. Its `reg: 0.001` (L2)
has no counterpart here.
"""

from dataclasses import dataclass

from recrunner.config.checks import at_least, positive


@dataclass
class Config:
    name: str = "lr"
    sparse_feature_number: int = 1_000_001
    # L2 on the embedding rows each training batch looks up (dygraph modes; 0: none).
    embedding_l2: float = 0.0
    sparse_grad: bool = True
    init_scale: float = 0.01

    def __post_init__(self) -> None:
        at_least("model", self, sparse_feature_number=1)
        positive("model", self, "init_scale")
        at_least("model", self, embedding_l2=0.0)
