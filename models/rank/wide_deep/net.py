"""The Wide & Deep network: one shared embedding table, a deep MLP and a wide linear part."""

import paddle
import paddle.nn as nn

from ..blocks import FieldNet, Linear, mlp, wide_crosses
from .config import Config


class Net(FieldNet):
    first_order = True  # the deep embedding and the wide per-id weight in one table

    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__(cfg, inputs, table)
        self.wide_dense = Linear(inputs.num_dense, 1) if inputs.num_dense else None
        self.deep = mlp(inputs.num_fields * self.dim + inputs.num_dense, cfg.fc_sizes,
                        cfg.dropout)
        # The W&D paper's cross-product transformations (model.wide_crosses; None: none).
        self.cross_table = wide_crosses(cfg, inputs)

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        inputs = self.field_inputs(dense, sparse_ids)
        assert inputs.wide is not None  # first_order
        wide_sparse = inputs.wide
        if self.cross_table is not None:
            wide_sparse = wide_sparse + self.cross_table(sparse_ids)
        deep = self.deep(inputs.deep)
        if self.wide_dense is None:
            return deep + wide_sparse
        return deep + self.wide_dense(dense) + wide_sparse
