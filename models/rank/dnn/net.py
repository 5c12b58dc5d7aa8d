"""The DNN network: field embeddings and dense features, concatenated, through an MLP."""

import paddle
import paddle.nn as nn

from ..blocks import FieldNet, embed_fields, mlp
from .config import Config


class Net(FieldNet):
    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__(cfg, inputs, table)
        self.deep = mlp(inputs.num_fields * self.dim + inputs.num_dense, cfg.fc_sizes,
                        cfg.dropout)

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        rows = embed_fields(self.embedding, sparse_ids, self.inputs)  # [B, fields, dim]
        return self.deep(self.flat(rows, dense))
