"""Building blocks the rank models share."""

import math

import paddle
import paddle.nn as nn


def id_table(number: int, width: int, sparse: bool, init_scale: float) -> nn.Embedding:
    """One embedding table for every sparse field; sparse=True gives SelectedRows gradients
    (with lazy Adam ~2.4x faster than dense ones)."""
    return nn.Embedding(number, width, sparse=sparse, weight_attr=paddle.ParamAttr(
        initializer=nn.initializer.Uniform(-init_scale, init_scale)))


def mlp(fan_in: int, hidden: list[int]) -> nn.Sequential:
    """ReLU layers of the given sizes, then one logit; weights scaled by 1/sqrt(fan_in)."""
    sizes = [fan_in, *hidden]
    layers: list[nn.Layer] = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(n_in, n_out, weight_attr=paddle.ParamAttr(
            initializer=nn.initializer.Normal(std=1.0 / math.sqrt(n_in)))), nn.ReLU()]
    layers.append(nn.Linear(sizes[-1], 1))
    return nn.Sequential(*layers)
