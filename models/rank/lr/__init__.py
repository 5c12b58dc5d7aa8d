"""Logistic regression over the hashed ids and the dense features: the floor every model must
beat (PaddleRec's models/rank/logistic_regression).

The network lives in `net.py` (imported on demand: importing paddle is slow).
"""

from .config import Config

__all__ = ["Config"]
