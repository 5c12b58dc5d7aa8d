"""The schema and default config of `model=tiny_lr`."""

from dataclasses import dataclass


@dataclass
class Config:
    name: str = "tiny_lr"  # the entry point's name
    # Keys the runner reads from every model: the id table's size and its update.
    sparse_feature_number: int = 100_003
    sparse_grad: bool = True
    init_scale: float = 0.01
