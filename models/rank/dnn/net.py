"""The DNN network: field embeddings and dense features, concatenated, through an MLP."""

import paddle
import paddle.nn as nn

from ..blocks import FieldNet, mlp, wide_crosses
from .config import Config


class Net(FieldNet):
    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__(cfg, inputs, table)
        self.deep = mlp(inputs.num_fields * self.dim + inputs.num_dense, cfg.fc_sizes,
                        cfg.dropout)
        # The W&D paper's cross-product transformations (model.wide_crosses; None: none).
        self.cross_table = wide_crosses(cfg, inputs)

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        deep = self.deep(self.field_inputs(dense, sparse_ids).deep)
        return deep if self.cross_table is None else deep + self.cross_table(sparse_ids)
