"""The DeepFM network: first-order weights, pairwise FM interactions and a deep MLP, all on
one embedding table."""

import paddle
import paddle.nn as nn

from models.rank.blocks import Linear, id_table, mlp, split_rows
from models.rank.deepfm.config import Config


class Net(nn.Layer):
    def __init__(self, cfg: Config, num_dense: int, num_sparse: int) -> None:
        super().__init__()
        self.num_sparse = num_sparse
        self.dim = cfg.sparse_feature_dim
        # Latent vector (dim columns) and first-order weight (1 column) in one lookup.
        self.embedding = id_table(cfg.sparse_feature_number, self.dim + 1, cfg.sparse_grad,
                                  cfg.init_scale)
        self.first_order_dense = Linear(num_dense, 1)
        self.deep = mlp(num_sparse * self.dim + num_dense, cfg.fc_sizes)

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        rows = self.embedding(sparse_ids)  # [B, num_sparse, dim + 1]
        latent, weight = split_rows(rows, self.dim)
        first = paddle.sum(weight, axis=1, keepdim=True) + self.first_order_dense(
            dense)
        # Sum over pairs <v_i, v_j> = ((sum_i v_i)^2 - sum_i v_i^2) / 2, summed over the dims.
        square_of_sum = paddle.square(paddle.sum(latent, axis=1))
        sum_of_square = paddle.sum(paddle.square(latent), axis=1)
        second = 0.5 * paddle.sum(square_of_sum - sum_of_square, axis=1, keepdim=True)
        deep = self.deep(paddle.concat(
            [paddle.reshape(latent, [-1, self.num_sparse * self.dim]), dense], axis=1))
        return first + second + deep
