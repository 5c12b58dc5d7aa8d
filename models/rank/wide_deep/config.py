"""Wide & Deep's config: the schema and, through its defaults, the model's default config."""

from dataclasses import dataclass, field

from ..base_config import MlpDropoutConfig
from ..wide_cross import check_wide_crosses


@dataclass
class Config(MlpDropoutConfig):
    name: str = "wide_deep"
    fc_sizes: list[int] = field(default_factory=lambda: [512, 256, 128, 32])
    # The W&D paper's cross-product transformations (blocks.WideCrosses): pairs of
    # single-valued field names (e.g. [[C1, C2]]) whose id pair gets its own wide weight, hashed
    # into wide_cross_buckets rows of a second table whose Adam rate is the table rate times
    # wide_cross_lr_scale (mode=local and mode=collective; docs/models.md measures it).
    wide_crosses: list[list[str]] = field(default_factory=list)
    wide_cross_buckets: int = 1_000_003
    wide_cross_lr_scale: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_wide_crosses(self)
