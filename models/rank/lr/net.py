"""The LR network: the sum of the ids' weights plus a linear function of the dense features."""

import paddle
import paddle.nn as nn

from ..blocks import Linear, embed_fields
from .config import Config

# Linear weights start at 0, as a logistic regression's do (Xavier's random start on raw
# log-counts gives logits of several units that take epochs to unlearn).
ZERO = paddle.ParamAttr(initializer=nn.initializer.Constant(0.0))


class Net(nn.Layer):
    @staticmethod
    def table_width(cfg: Config) -> int:
        return 1  # one weight per id

    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__()
        self.inputs = inputs
        self.embedding = table
        self.dense = Linear(inputs.num_dense, 1, weight_attr=ZERO) if inputs.num_dense else None
        # The bias, for data without dense features (with them, the dense layer's bias).
        self.bias = None if self.dense else self.create_parameter(
            [1], is_bias=True, default_initializer=nn.initializer.Constant(0.0))

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        weights = embed_fields(self.embedding, sparse_ids, self.inputs)  # [B, fields, 1]
        logit = paddle.sum(paddle.reshape(weights, [-1, self.inputs.num_fields]), axis=1,
                           keepdim=True)
        if self.dense is None:
            return logit if self.bias is None else logit + self.bias
        return logit + self.dense(dense)
