"""The DNN's config: the schema and, through its defaults, the model's default config.

From PaddleRec's models/rank/dnn/config.yaml: `sparse_feature_dim: 9`,
`fc_sizes: [512, 256, 128, 32]`, `sparse_feature_number: 1000001`, Adam at 0.001.
PaddleRec's DNN has no dropout (`dropout` stays 0.0).
"""

from dataclasses import dataclass, field

from ..base_config import MlpDropoutConfig
from ..wide_cross import WideCrossConfig


@dataclass
class Config(WideCrossConfig, MlpDropoutConfig):
    name: str = "dnn"
    fc_sizes: list[int] = field(default_factory=lambda: [512, 256, 128, 32])
