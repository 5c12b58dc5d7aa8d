"""A plain DNN: an MLP over the concatenated field embeddings and dense features (PaddleRec's
models/rank/dnn, the baseline of Covington et al. 2016 style ranking).

The network lives in `net.py` (imported on demand: importing paddle is slow).
"""

from .config import Config

__all__ = ["Config"]
