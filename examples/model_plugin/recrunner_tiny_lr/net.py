"""One weight per hashed id, summed over the fields, plus a linear layer over the dense ones."""

from typing import Any

import paddle
import paddle.nn as nn

from recrunner.zoo.rank.blocks import embed_fields  # the bundled zoo's blocks are reusable

from .config import Config


class Net(nn.Layer):
    @staticmethod
    def table_width(cfg: Config) -> int:
        return 1  # a logistic regression needs one weight per id

    def __init__(self, cfg: Config, inputs: Any, table: nn.Layer) -> None:
        super().__init__()
        self.inputs = inputs
        self.embedding = table  # the runner's id table (the parameter servers' in mode=ps)
        self.dense = nn.Linear(inputs.num_dense, 1) if inputs.num_dense else None

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        weights = embed_fields(self.embedding, sparse_ids, self.inputs)  # [B, fields, 1]
        logits = paddle.sum(weights, axis=1)
        return logits if self.dense is None else logits + self.dense(dense)
