"""FM's config: the schema and, through its defaults, the model's default config.

From PaddleRec's models/rank/fm/config.yaml: `sparse_feature_dim: 9`,
`sparse_feature_number: 1000001`, Adam at 0.001; as there, each dense feature has a latent
vector too (scaled by its value) and takes part in the pairwise interactions.
"""

from dataclasses import dataclass

from ..base_config import EmbeddingConfig


@dataclass
class Config(EmbeddingConfig):
    name: str = "fm"
