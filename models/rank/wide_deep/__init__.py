"""Wide & Deep (Cheng et al. 2016) for CTR prediction, PaddleRec-style.

The network lives in `net.py` (imported on demand: importing paddle is slow).
"""

from .config import Config

__all__ = ["Config"]
