"""The DCN-V2 network: x_{l+1} = x_0 * (W_l x_l + b_l) + x_l over the concatenated field
embeddings and dense features, with an MLP stacked on it or beside it."""

import math

import paddle
import paddle.nn as nn

from ..blocks import FieldNet, Linear, hidden_layers, mlp, wide_crosses
from .config import Config, Structure


class CrossLayer(nn.Layer):
    """One cross layer's W x + b: full rank, or low rank (U (V^T x) + b)."""

    def __init__(self, width: int, low_rank: int) -> None:
        super().__init__()
        std = 1.0 / math.sqrt(width)
        init = paddle.ParamAttr(initializer=nn.initializer.Normal(std=std))
        if low_rank:
            self.down: Linear | None = Linear(width, low_rank, weight_attr=init, bias_attr=False)
            self.up = Linear(low_rank, width, weight_attr=paddle.ParamAttr(
                initializer=nn.initializer.Normal(std=1.0 / math.sqrt(low_rank))))
        else:
            self.down = None
            self.up = Linear(width, width, weight_attr=init)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.up(x if self.down is None else self.down(x))


class Net(FieldNet):
    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__(cfg, inputs, table)
        width = inputs.num_fields * self.dim + inputs.num_dense
        self.cross = nn.LayerList([CrossLayer(width, cfg.low_rank)
                                   for _ in range(cfg.cross_num)])
        self.stacked = cfg.structure == Structure.stacked
        if self.stacked:
            self.deep = mlp(width, cfg.fc_sizes, cfg.dropout)
        else:
            self.deep = nn.Sequential(*hidden_layers(width, cfg.fc_sizes, cfg.dropout))
            self.out = Linear(width + cfg.fc_sizes[-1], 1)
        # The W&D paper's cross-product transformations (model.wide_crosses; None: none).
        self.cross_table = wide_crosses(cfg, inputs)

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        x0 = self.field_inputs(dense, sparse_ids).deep
        x = x0
        for layer in self.cross:
            x = x0 * layer(x) + x
        if self.stacked:
            logit = self.deep(x)
        else:
            logit = self.out(paddle.concat([x, self.deep(x0)], axis=1))
        return logit if self.cross_table is None else logit + self.cross_table(sparse_ids)
