"""The Wide & Deep network: one shared embedding table, a deep MLP and a wide linear part."""

import paddle
import paddle.nn as nn

from models.rank.blocks import Linear, id_table, mlp, split_rows
from models.rank.wide_deep.config import Config


class Net(nn.Layer):
    def __init__(self, cfg: Config, num_dense: int, num_sparse: int) -> None:
        super().__init__()
        self.num_sparse = num_sparse
        self.dim = cfg.sparse_feature_dim
        # Deep embedding (dim columns) and wide per-id weight (1 column) share one table:
        # one lookup and one sparse optimizer update instead of two.
        self.embedding = id_table(cfg.sparse_feature_number, self.dim + 1, cfg.sparse_grad,
                                  cfg.init_scale)
        self.wide_dense = Linear(num_dense, 1)
        self.deep = mlp(num_sparse * self.dim + num_dense, cfg.fc_sizes)

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        rows = self.embedding(sparse_ids)  # [B, num_sparse, dim + 1]
        latent, weight = split_rows(rows, self.dim)
        deep_emb = paddle.reshape(latent, [-1, self.num_sparse * self.dim])
        wide_sparse = paddle.sum(weight, axis=1, keepdim=True)
        deep = self.deep(paddle.concat([deep_emb, dense], axis=1))
        return deep + self.wide_dense(dense) + wide_sparse
