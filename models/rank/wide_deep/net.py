"""The Wide & Deep network: one shared embedding table, a deep MLP and a wide linear part."""

import paddle
import paddle.nn as nn

from ..blocks import Linear, embed_fields, mlp, split_rows, wide_crosses
from .config import Config


class Net(nn.Layer):
    @staticmethod
    def table_width(cfg: Config) -> int:
        # Deep embedding (dim columns) and wide per-id weight (1 column) share one table:
        # one lookup and one sparse optimizer update instead of two.
        return cfg.sparse_feature_dim + 1

    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__()
        self.inputs = inputs
        self.dim = cfg.sparse_feature_dim
        self.embedding = table
        self.wide_dense = Linear(inputs.num_dense, 1) if inputs.num_dense else None
        self.deep = mlp(inputs.num_fields * self.dim + inputs.num_dense, cfg.fc_sizes,
                        cfg.dropout)
        # The paper's cross-product transformations (model.wide_crosses; None: none).
        self.cross_table = wide_crosses(cfg, inputs)

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        rows = embed_fields(self.embedding, sparse_ids, self.inputs)  # [B, fields, dim + 1]
        latent, weight = split_rows(rows, self.dim)
        deep_in = paddle.reshape(latent, [-1, self.inputs.num_fields * self.dim])
        wide_sparse = paddle.sum(weight, axis=1, keepdim=True)
        if self.cross_table is not None:
            wide_sparse = wide_sparse + self.cross_table(sparse_ids)
        if self.wide_dense is None:
            return self.deep(deep_in) + wide_sparse
        deep = self.deep(paddle.concat([deep_in, dense], axis=1))
        return deep + self.wide_dense(dense) + wide_sparse
