"""The DeepFM network: first-order weights, pairwise FM interactions and a deep MLP, all on
one embedding table."""

import paddle
import paddle.nn as nn

from ..blocks import FieldNet, Linear, fm_pairwise, mlp, wide_crosses
from .config import Config


class Net(FieldNet):
    first_order = True  # latent vector and first-order weight in one lookup

    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__(cfg, inputs, table)
        self.first_order_dense = Linear(inputs.num_dense, 1) if inputs.num_dense else None
        self.deep = mlp(inputs.num_fields * self.dim + inputs.num_dense, cfg.fc_sizes)
        # The W&D paper's cross-product transformations (model.wide_crosses; None: none).
        self.cross_table = wide_crosses(cfg, inputs)

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        inputs = self.field_inputs(dense, sparse_ids)
        assert inputs.wide is not None  # first_order
        first = inputs.wide
        deep = self.deep(inputs.deep)
        if self.first_order_dense is not None:
            first = first + self.first_order_dense(dense)
        if self.cross_table is not None:
            first = first + self.cross_table(sparse_ids)
        return first + fm_pairwise(inputs.latent) + deep
