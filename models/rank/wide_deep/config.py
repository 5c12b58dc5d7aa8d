"""Wide & Deep's config: the schema and, through its defaults, the model's default config."""

from dataclasses import dataclass, field

from recrunner.config.checks import at_least

from ..base_config import MlpDropoutConfig


@dataclass
class Config(MlpDropoutConfig):
    name: str = "wide_deep"
    fc_sizes: list[int] = field(default_factory=lambda: [512, 256, 128, 32])
    # The paper's cross-product transformations: pairs of single-valued field names (e.g.
    # [[C1, C2]]) whose id pair gets its own wide weight, hashed into wide_cross_buckets rows
    # of a second table (mode=local and mode=collective; docs/models.md measures it).
    wide_crosses: list[list[str]] = field(default_factory=list)
    wide_cross_buckets: int = 1_000_003

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least("model", self, wide_cross_buckets=1)
        if any(len(pair) != 2 for pair in self.wide_crosses):
            raise ValueError(f"model.wide_crosses={[list(p) for p in self.wide_crosses]} must be "
                             "a list of [field, field] pairs")
