"""The FM network: w0 + sum_i w_i x_i + sum_{i<j} <v_i, v_j> x_i x_j over the sparse fields
(x = 1) and the dense features (x = their value), all ids in one table."""

import paddle
import paddle.nn as nn

from ..blocks import FieldNet, Linear, fm_pairwise
from .config import Config

# Linear weights start at 0, as a logistic regression's do (Xavier's random start on raw
# log-counts gives logits of several units that take epochs to unlearn).
ZERO = paddle.ParamAttr(initializer=nn.initializer.Constant(0.0))


class Net(FieldNet):
    first_order = True  # latent vector and first-order weight in one lookup

    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__(cfg, inputs, table)
        self.first_order_dense = (Linear(inputs.num_dense, 1, weight_attr=ZERO)
                                  if inputs.num_dense else None)
        self.bias = None if self.first_order_dense else self.create_parameter(
            [1], is_bias=True, default_initializer=nn.initializer.Constant(0.0))
        # The dense features' latent vectors, [num_dense, dim] (the table's scale).
        self.dense_latent = self.create_parameter(
            [inputs.num_dense, self.dim], default_initializer=nn.initializer.Uniform(
                -cfg.init_scale, cfg.init_scale)) if inputs.num_dense else None

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        inputs = self.field_inputs(dense, sparse_ids)
        assert inputs.wide is not None  # first_order
        latent, first = inputs.latent, inputs.wide
        if self.first_order_dense is None or self.dense_latent is None:
            return first + fm_pairwise(latent) + (0.0 if self.bias is None else self.bias)
        # x_i v_i of each dense feature: [B, num_dense, dim].
        dense_latent = paddle.unsqueeze(dense, 2) * paddle.unsqueeze(self.dense_latent, 0)
        latent = paddle.concat([latent, dense_latent], axis=1)
        return first + self.first_order_dense(dense) + fm_pairwise(latent)
