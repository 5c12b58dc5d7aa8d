"""Logistic regression for CTR: a recrunner model plugin (`recrun train model=tiny_lr`).

The contract is the bundled models' (recrunner/models.py): this package exports `Config`,
and `recrunner_tiny_lr.net` holds `Net` (imported on demand: importing paddle is slow).
"""

from .config import Config

__all__ = ["Config"]
