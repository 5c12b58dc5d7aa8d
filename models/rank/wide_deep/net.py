"""The Wide & Deep network: one shared embedding table, a deep MLP and a wide linear part."""

import paddle
import paddle.nn as nn

from recrunner.errors import RecrunnerError

from ..blocks import FieldNet, Linear, embed_fields, id_table, mlp, split_rows
from .config import Config

# Mixes a crossed pair's first id before the second is added: pairs land in unrelated rows.
CROSS_MULTIPLIER = 2_654_435_761


class Net(FieldNet):
    first_order = True  # the deep embedding and the wide per-id weight in one table

    def __init__(self, cfg: Config, inputs, table: nn.Layer) -> None:  # noqa: ANN001
        super().__init__(cfg, inputs, table)
        self.wide_dense = Linear(inputs.num_dense, 1) if inputs.num_dense else None
        self.deep = mlp(inputs.num_fields * self.dim + inputs.num_dense, cfg.fc_sizes,
                        cfg.dropout)
        self.crosses = [cross_columns(inputs, pair) for pair in cfg.wide_crosses]
        self.cross_buckets = cfg.wide_cross_buckets
        self.cross_table = id_table(cfg.wide_cross_buckets, 1, cfg.sparse_grad,
                                    cfg.init_scale) if self.crosses else None

    def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        rows = embed_fields(self.embedding, sparse_ids, self.inputs)  # [B, fields, dim + 1]
        latent, weight = split_rows(rows, self.dim)
        wide_sparse = paddle.sum(weight, axis=1, keepdim=True)
        if self.cross_table is not None:
            wide_sparse = wide_sparse + self.wide_crossed(sparse_ids)
        deep = self.deep(self.flat(latent, dense))
        if self.wide_dense is None:
            return deep + wide_sparse
        return deep + self.wide_dense(dense) + wide_sparse

    def wide_crossed(self, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        """The sum of each crossed pair's own weight: [B, 1]."""
        # int64 tensors, not Python ints: a scalar product becomes a float32 scale op when
        # exported, which rounds the keys (the export check caught it: 0.03 off).
        multiplier = paddle.full([1], CROSS_MULTIPLIER, "int64")
        keys = [paddle.multiply(sparse_ids[:, a], multiplier) + sparse_ids[:, b]
                for a, b in self.crosses]
        ids = paddle.remainder(paddle.stack(keys, axis=1), paddle.full([1], self.cross_buckets,
                                                                      "int64"))
        # [B, crosses, 1] -> [B, 1]; only called with crosses (a table).
        return paddle.sum(self.cross_table(ids), axis=1)  # type: ignore[misc]


def cross_columns(inputs, pair: list[str]) -> tuple[int, int]:  # noqa: ANN001
    """The id columns of a wide_crosses pair of single-valued fields."""
    columns, start = {}, 0
    for f in inputs.fields:
        if f.width == 1:
            columns[f.name] = start
        start += f.width
    for name in pair:
        if name not in columns:
            raise RecrunnerError(f"model.wide_crosses names {name!r}: not a single-valued field "
                                 f"of this dataset ({', '.join(list(columns)[:6])}, ...)")
    return columns[pair[0]], columns[pair[1]]
