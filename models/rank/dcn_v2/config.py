"""DCN-V2's config: the schema and, through its defaults, the model's default config.

From PaddleRec's models/rank/dcn_v2/config.yaml: the stacked structure (`is_Stacked: True`),
`cross_num: 2`, full-rank cross layers (`use_low_rank_mixture: False`). The paper (Wang et al.
2021, section 6) finds stacked and parallel close on Criteo; low rank (`low_rank` > 0, the
paper's W = U V^T) trades a little AUC for speed. PaddleRec's `fc_sizes: [768, 768]` and
`sparse_feature_dim: 40` are for the full Criteo on a GPU; the defaults here are sized for the
default data on a CPU (docs/models.md measures them). PaddleRec's dropout is 0.5 (`dropout`
here: 0.0, see docs/models.md).
"""

from dataclasses import dataclass, field
from enum import StrEnum

from recrunner.config.checks import at_least

from ..base_config import MlpDropoutConfig
from ..wide_cross import WideCrossConfig


class Structure(StrEnum):
    stacked = "stacked"  # cross network, then the MLP on its output
    parallel = "parallel"  # cross network and MLP side by side on the embeddings


@dataclass
class Config(WideCrossConfig, MlpDropoutConfig):
    name: str = "dcn_v2"
    fc_sizes: list[int] = field(default_factory=lambda: [512, 256, 128])
    cross_num: int = 2
    structure: Structure = Structure.stacked
    # 0: full-rank cross weights (D x D); r > 0: W = U V^T with U, V of D x r.
    low_rank: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("model", self, cross_num=1, low_rank=0)
