"""DCN-V2 (Wang et al. 2021, "DCN V2: Improved Deep & Cross Network"): a cross network of
explicit feature crosses and a deep MLP over shared embeddings.

The network lives in `net.py` (imported on demand: importing paddle is slow).
"""

from .config import Config

__all__ = ["Config"]
