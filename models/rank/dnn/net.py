"""The DNN network: field embeddings and dense features, concatenated, through an MLP."""

import paddle
import paddle.nn as nn

from ..blocks import embed_fields, mlp, wide_crosses
from .config import Config


class Net(nn.Layer):
    @staticmethod
    def table_width(cfg: Config) -> int:
        return cfg.sparse_feature_dim

    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__()
        self.inputs = inputs
        self.dim = cfg.sparse_feature_dim
        self.embedding = table
        self.deep = mlp(inputs.num_fields * self.dim + inputs.num_dense, cfg.fc_sizes,
                        cfg.dropout)
        # The W&D paper's cross-product transformations (model.wide_crosses; None: none).
        self.cross_table = wide_crosses(cfg, inputs)

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        rows = embed_fields(self.embedding, sparse_ids, self.inputs)  # [B, fields, dim]
        x = paddle.reshape(rows, [-1, self.inputs.num_fields * self.dim])
        if self.inputs.num_dense:
            x = paddle.concat([x, dense], axis=1)
        if self.cross_table is None:
            return self.deep(x)
        return self.deep(x) + self.cross_table(sparse_ids)
