"""DeepFM (Guo et al. 2017): factorization machine and deep MLP over shared embeddings.

The network lives in `net.py` (imported on demand: importing paddle is slow).
"""

from .config import Config

__all__ = ["Config"]
