"""LR's config: the schema and, through its defaults, the model's default config.

From PaddleRec's models/rank/logistic_regression/config.yaml: one weight per hashed id
(`sparse_feature_number`; PaddleRec's 1086460 is its Criteo vocabulary, here the common hashed
space of the other models) plus one per dense feature, Adam at 0.001. Its `reg: 0.001` (L2)
has no counterpart here.
"""

from dataclasses import dataclass

from ..base_config import TableConfig


@dataclass
class Config(TableConfig):
    name: str = "lr"
