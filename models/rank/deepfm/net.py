"""The DeepFM network: first-order weights, pairwise FM interactions and a deep MLP, all on
one embedding table."""

import paddle
import paddle.nn as nn

from ..blocks import Linear, embed_fields, fm_pairwise, mlp, split_rows, wide_crosses
from .config import Config


class Net(nn.Layer):
    @staticmethod
    def table_width(cfg: Config) -> int:
        # Latent vector (dim columns) and first-order weight (1 column) in one lookup.
        return cfg.sparse_feature_dim + 1

    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__()
        self.inputs = inputs
        self.dim = cfg.sparse_feature_dim
        self.embedding = table
        self.first_order_dense = Linear(inputs.num_dense, 1) if inputs.num_dense else None
        self.deep = mlp(inputs.num_fields * self.dim + inputs.num_dense, cfg.fc_sizes)
        # The W&D paper's cross-product transformations (model.wide_crosses; None: none).
        self.cross_table = wide_crosses(cfg, inputs)

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        rows = embed_fields(self.embedding, sparse_ids, self.inputs)  # [B, fields, dim + 1]
        latent, weight = split_rows(rows, self.dim)
        first = paddle.sum(weight, axis=1, keepdim=True)
        deep_in = paddle.reshape(latent, [-1, self.inputs.num_fields * self.dim])
        if self.first_order_dense is not None:
            first = first + self.first_order_dense(dense)
            deep_in = paddle.concat([deep_in, dense], axis=1)
        if self.cross_table is not None:
            first = first + self.cross_table(sparse_ids)
        return first + fm_pairwise(latent) + self.deep(deep_in)
