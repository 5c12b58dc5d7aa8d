"""Factorization machine (Rendle 2010): first-order weights plus pairwise interactions of
latent vectors, PaddleRec's models/rank/fm.

The network lives in `net.py` (imported on demand: importing paddle is slow).
"""

from .config import Config

__all__ = ["Config"]
