"""DeepFM's config: the schema and, through its defaults, the model's default config.

One shared table: each id has a latent vector (sparse_feature_dim) and a 1st-order weight.
"""

from dataclasses import dataclass, field

from ..base_config import MlpConfig
from ..wide_cross import WideCrossConfig


@dataclass
class Config(WideCrossConfig, MlpConfig):
    name: str = "deepfm"
    fc_sizes: list[int] = field(default_factory=lambda: [400, 400, 400])
