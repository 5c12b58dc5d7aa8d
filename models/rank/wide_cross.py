"""The config side of the wide cross-product block (`blocks.WideCrosses`): the keys of each
opting-in model's Config, `wide_crosses`, `wide_cross_buckets` and `wide_cross_lr_scale`, and
their check (no paddle import: configs load before paddle)."""

from dataclasses import dataclass, field
from typing import Any

from recrunner.config.checks import at_least, positive


def check_wide_crosses(cfg: Any) -> None:
    """The pairs are [field, field]; buckets and the rate scale are in range."""
    at_least("model", cfg, wide_cross_buckets=1)
    positive("model", cfg, "wide_cross_lr_scale")
    if any(len(pair) != 2 for pair in cfg.wide_crosses):
        raise ValueError(f"model.wide_crosses={[list(p) for p in cfg.wide_crosses]} must be "
                         "a list of [field, field] pairs")


@dataclass
class WideCrossConfig:
    """The keys of a model that opts in: the first of its Config's bases
    (`Config(WideCrossConfig, MlpDropoutConfig)`), so that they follow its parent's keys."""

    # The W&D paper's cross-product transformations (blocks.WideCrosses): pairs of
    # single-valued field names (e.g. [[C1, C2]]) whose id pair gets its own wide weight, hashed
    # into wide_cross_buckets rows of a second table whose Adam rate is the table rate times
    # wide_cross_lr_scale (mode=local and mode=collective; docs/models.md measures it).
    wide_crosses: list[list[str]] = field(default_factory=list)
    wide_cross_buckets: int = 1_000_003
    wide_cross_lr_scale: float = 1.0

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)  # the other base's checks first
        if parent is not None:
            parent()
        check_wide_crosses(self)
