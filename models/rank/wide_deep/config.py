"""Wide & Deep's config: the schema and, through its defaults, the model's default config."""

from dataclasses import dataclass, field

from ..base_config import MlpDropoutConfig
from ..wide_cross import WideCrossConfig


@dataclass
class Config(WideCrossConfig, MlpDropoutConfig):
    name: str = "wide_deep"
    fc_sizes: list[int] = field(default_factory=lambda: [512, 256, 128, 32])
