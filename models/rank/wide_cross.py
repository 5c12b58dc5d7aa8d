"""The config side of the wide cross-product block (`blocks.WideCrosses`): the check each
opting-in model's Config runs on its `wide_crosses`, `wide_cross_buckets` and
`wide_cross_lr_scale` keys (no paddle import: configs load before paddle)."""

from typing import Any

from recrunner.config.checks import at_least, positive


def check_wide_crosses(cfg: Any) -> None:
    """The pairs are [field, field]; buckets and the rate scale are in range."""
    at_least("model", cfg, wide_cross_buckets=1)
    positive("model", cfg, "wide_cross_lr_scale")
    if any(len(pair) != 2 for pair in cfg.wide_crosses):
        raise ValueError(f"model.wide_crosses={[list(p) for p in cfg.wide_crosses]} must be "
                         "a list of [field, field] pairs")
