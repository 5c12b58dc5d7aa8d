"""FM's config: the schema and, through its defaults, the model's default config.

From PaddleRec's models/rank/fm/config.yaml: `sparse_feature_dim: 9`,
`sparse_feature_number: 1000001`, Adam at 0.001; as there, each dense feature has a latent
vector too (scaled by its value) and takes part in the pairwise interactions.
"""

from dataclasses import dataclass

from recrunner.config.checks import at_least, positive


@dataclass
class Config:
    name: str = "fm"
    sparse_feature_number: int = 1_000_001
    sparse_feature_dim: int = 9
    # L2 on the embedding rows each training batch looks up (dygraph modes; 0: none).
    embedding_l2: float = 0.0
    sparse_grad: bool = True
    init_scale: float = 0.01

    def __post_init__(self) -> None:
        at_least("model", self, sparse_feature_number=1, sparse_feature_dim=1)
        positive("model", self, "init_scale")
        at_least("model", self, embedding_l2=0.0)
