"""Building blocks the rank models share.

Their training paths work around slow CPU kernels of Paddle 3.0 (measured on the 2-core CI
machine, batch 512; tests/test_blocks.py checks each computes what the plain layer does): the
gradient of a broadcast bias add took ~2.5 ms for a 512-wide layer and that of slicing the
[B, fields, dim + 1] lookup ~3 ms, together over a third of a W&D step; as matmuls they take
~0.3 ms each. Evaluation and export run the plain layers.
"""

import functools
import math
from typing import Any, NamedTuple

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from recrunner.errors import RecrunnerError

# Mixes a crossed pair's first id before the second is added: pairs land in unrelated rows.
CROSS_MULTIPLIER = 2_654_435_761


class IdTable(nn.Embedding):
    """nn.Embedding (same parameter) that, training in dygraph with sparse gradients, looks up
    each distinct id of the batch once, in sorted order, and gathers from those rows. The lazy
    Adam update then sees distinct sorted rows and skips its merge of duplicates: 2.7 -> 1.4 ms
    a step on the default data (30% of a batch's ids distinct).

    With `host_rows` (set by recrunner.train.row_adam.RowAdam, mode=local) the distinct rows
    (first-seen order) are copied out of the table into a leaf tensor of their own, recorded in
    `touched`, and the optimizer updates them in the table itself: no SelectedRows gradient."""

    host_rows = False
    row_l2 = 0.0  # DecayedIdTable: L2 on the rows a batch uses

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (distinct ids, their leaf tensor, its values) per training lookup of the step
        self.touched: list[tuple[np.ndarray, paddle.Tensor, np.ndarray]] = []

    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        if not (self.training and self._sparse and paddle.in_dynamic_mode()):
            # nn.Embedding's lookup itself, not super(): the export's static conversion resolves
            # super() from the instance's class, which recursed forever for DecayedIdTable.
            padding = None if self._padding_idx is None else int(self._padding_idx)
            return F.embedding(ids, self.weight, padding_idx=padding, sparse=self._sparse,
                               name=self._name)
        index, rows = self.distinct_rows(ids)
        positions = paddle.to_tensor(index.reshape(-1))
        # A dense lookup into the distinct rows: its gradient kernel is 2x gather's.
        return paddle.reshape(F.embedding(positions, rows), [*ids.shape, self._embedding_dim])

    def distinct_rows(self, ids: paddle.Tensor) -> tuple[np.ndarray, paddle.Tensor]:
        """Training in dygraph with sparse gradients: each id's index into the batch's
        distinct ids (shaped as `ids`), and those ids' rows [n, width]."""
        if self.host_rows:
            index, rows = self._host_lookup(ids)
        else:
            distinct, index = np.unique(ids.numpy(), return_inverse=True)
            rows = super().forward(paddle.to_tensor(distinct))
        return index.reshape(ids.shape), rows

    # Not converted when an export has turned forward() into a static function (later passes of
    # an online run train through it): dy2static would try to convert pyarrow.
    @paddle.jit.not_to_static
    def _host_lookup(self, ids: paddle.Tensor) -> tuple[np.ndarray, paddle.Tensor]:
        """Each id's index into the batch's distinct rows, and those rows as a new leaf."""
        from recrunner.train.row_adam import gather_distinct

        distinct, index, values = gather_distinct(ids.numpy(), self.weight)
        rows = paddle.to_tensor(values, stop_gradient=False)  # a copy: `values` stays ours
        self.touched.append((distinct, rows, values))  # the update starts from `values`
        if self.row_l2 > 0:
            return index, RowDecay.apply(rows, self.row_l2)
        return index, rows


def id_table(number: int, width: int, sparse: bool, init_scale: float) -> IdTable:
    """One embedding table for every sparse field; sparse=True gives SelectedRows gradients
    (with lazy Adam ~2.4x faster than dense ones)."""
    return IdTable(number, width, sparse=sparse, weight_attr=paddle.ParamAttr(
        initializer=nn.initializer.Uniform(-init_scale, init_scale)))


@functools.lru_cache(maxsize=16)
def pooling_matrices(inputs: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """For `embed_fields`, once per layout (not every step): the [fields, S] 0/1 matrix of
    which id columns form each field, and the mean fields' indicator (None: all sum)."""
    pool = np.zeros((inputs.num_fields, inputs.sparse_width), np.float32)
    start = 0
    for k, field in enumerate(inputs.fields):
        pool[k, start:start + field.width] = 1.0
        start += field.width
    is_mean = np.array([f.pooling == "mean" for f in inputs.fields], np.float32)
    return pool, (is_mean if is_mean.any() else None)


def embed_fields(table: nn.Layer, ids: paddle.Tensor, inputs: Any) -> paddle.Tensor:
    """The caller's id table over `ids` [B, S], one row per field: [B, fields, width].

    `inputs` (recrunner.models.ModelInputs) says which id columns form each field. With only
    single-valued fields that is the lookup itself. Multi-valued fields are pooled by a matmul
    with a constant [fields, S] matrix over the rows, padding ids masked out (sum, or mean over
    the ids present), which avoids per-field slices (slow gradients in Paddle 3.0 on the CPU).
    """
    rows = table(ids)
    if inputs.pad_id is None:
        return rows
    pool, is_mean = pooling_matrices(inputs)
    # (mode=ps feeds the ids as one flat sequence per row: back to [B, S] for the mask.)
    ids = paddle.reshape(ids, [-1, inputs.sparse_width])
    present = paddle.cast(ids != inputs.pad_id, rows.dtype)  # [B, S]
    pool_t = paddle.to_tensor(pool) if paddle.in_dynamic_mode() else paddle.assign(pool)
    pooled = paddle.matmul(pool_t, rows * present.unsqueeze(-1))  # [B, fields, width]
    if is_mean is not None:
        counts = paddle.matmul(present, pool_t, transpose_y=True)  # [B, fields]
        mean_t = paddle.to_tensor(is_mean) if paddle.in_dynamic_mode() else paddle.assign(is_mean)
        # Sum fields divide by 1; mean fields by their count (at least 1: empty lists give 0).
        divisor = 1.0 + mean_t * (paddle.clip(counts, min=1.0) - 1.0)
        pooled = pooled / divisor.unsqueeze(-1)
    return pooled


def split_rows(rows: paddle.Tensor, dim: int) -> tuple[paddle.Tensor, paddle.Tensor]:
    """[B, fields, dim + 1] table rows -> latent vectors [B, fields, dim] and per-id weights
    [B, fields], by matmuls with columns of an identity matrix instead of slices."""
    fields = rows.shape[1]
    flat = paddle.reshape(rows, [-1, dim + 1])
    select = paddle.eye(dim + 1, dtype=rows.dtype)
    latent = paddle.reshape(paddle.matmul(flat, select[:, :dim]), [-1, fields, dim])
    weight = paddle.reshape(paddle.matmul(flat, select[:, dim:]), [-1, fields])
    return latent, weight


class Linear(nn.Linear):
    """nn.Linear (same parameters), optionally followed by a ReLU (`relu`), whose training
    step in dygraph is recrunner's fused kernel (recrunner/kernels: the bias and the ReLU in
    one pass over the GEMM's output, and one backward pass before the two GEMMs), or, where
    that kernel is off or unavailable, Paddle's matmul and broadcast add: the add's gradient
    sums the batch's rows in order, on every CPU, as the kernel does. In mode=ps's static
    graph the bias is added by a matmul, whose gradient ones^T @ grad is one fast GEMV (+12%),
    but MKL sums those rows in an order of its own, which differs between CPUs (in order on
    AMD's EPYC, not on an Intel Xeon with AVX-512): in dygraph the fused and the plain
    operators must train one model bit for bit (tests/test_kernels.py)."""

    def __init__(self, in_features: int, out_features: int, *, relu: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(in_features, out_features, **kwargs)
        self.relu = relu

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        if not self.training or self.bias is None:
            out = super().forward(x)
        elif paddle.in_dynamic_mode() and _fused_kernels():
            return _fused_dense(x, self.weight, self.bias, self.relu)
        elif paddle.in_dynamic_mode():
            out = paddle.matmul(x, self.weight) + self.bias
        else:
            ones = paddle.ones_like(x[:, :1])  # the batch size is known only when run
            out = paddle.matmul(x, self.weight) + paddle.matmul(ones, self.bias.unsqueeze(0))
        return F.relu(out) if self.relu else out


# Outside forward(): the export's static conversion must not convert the kernels' loader.
@paddle.jit.not_to_static
def _fused_kernels() -> bool:
    from recrunner import kernels

    return kernels.ready()


@paddle.jit.not_to_static
def _fused_dense(x: paddle.Tensor, weight: paddle.Tensor, bias: paddle.Tensor,
                 relu: bool) -> paddle.Tensor:
    from recrunner import kernels

    return kernels.dense(x, weight, bias, relu)


@paddle.jit.not_to_static
def _fused_fields(rows: paddle.Tensor, index: paddle.Tensor, dense: paddle.Tensor,
                  dim: int) -> tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
    from recrunner import kernels

    return kernels.fields(rows, index, dense, dim)


class ReluInLinear(nn.Layer):
    """Where a hidden layer's ReLU stood: its Linear (relu=True) applies it. Keeping the
    place keeps the Sequential's indices, so parameter names and checkpoints are unchanged."""

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return x


def hidden_layers(fan_in: int, hidden: list[int], dropout: float = 0.0) -> list[nn.Layer]:
    """ReLU layers of the given sizes (weights scaled by 1/sqrt(fan_in)), each followed by
    dropout when `dropout` > 0 (identity in eval mode, so exports carry none)."""
    sizes = [fan_in, *hidden]
    layers: list[nn.Layer] = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [Linear(n_in, n_out, relu=True, weight_attr=paddle.ParamAttr(
            initializer=nn.initializer.Normal(std=1.0 / math.sqrt(n_in)))), ReluInLinear()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
    return layers


def mlp(fan_in: int, hidden: list[int], dropout: float = 0.0) -> nn.Sequential:
    """ReLU layers of the given sizes, then one logit; weights scaled by 1/sqrt(fan_in)."""
    layers = hidden_layers(fan_in, hidden, dropout)
    layers.append(Linear(hidden[-1] if hidden else fan_in, 1))
    return nn.Sequential(*layers)


def fm_pairwise(latent: paddle.Tensor) -> paddle.Tensor:
    """The factorization machine's second-order term of latent vectors [B, fields, dim]:
    sum over pairs <v_i, v_j> = ((sum_i v_i)^2 - sum_i v_i^2) / 2, summed over dims: [B, 1]."""
    square_of_sum = paddle.square(paddle.sum(latent, axis=1))
    sum_of_square = paddle.sum(paddle.square(latent), axis=1)
    return 0.5 * paddle.sum(square_of_sum - sum_of_square, axis=1, keepdim=True)


class RowDecay(paddle.autograd.PyLayer):
    """Identity whose backward adds l2 * row to each looked-up row's gradient: L2 on the rows a
    batch uses (once per distinct id), which keeps the table's update lazy (a decay of the
    whole table would make it dense)."""

    @staticmethod
    def forward(ctx: Any, rows: paddle.Tensor, l2: float) -> paddle.Tensor:
        ctx.save_for_backward(rows)
        ctx.l2 = l2
        return rows.clone()

    @staticmethod
    def backward(ctx: Any, grad: paddle.Tensor) -> paddle.Tensor:
        (rows,) = ctx.saved_tensor()
        return grad + ctx.l2 * rows


class _DecayedLookup(nn.Embedding):
    """The lookup IdTable's training path calls (through super()) for the distinct ids."""

    row_l2: float  # IdTable's

    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        rows = super().forward(ids)
        if self.training and paddle.in_dynamic_mode():
            return RowDecay.apply(rows, self.row_l2)
        return rows


class DecayedIdTable(IdTable, _DecayedLookup):
    """IdTable whose training lookups decay the rows they touch by row_l2 (model.embedding_l2;
    dygraph modes: mode=ps's tables live on the servers)."""


def decayed_id_table(number: int, width: int, sparse: bool, init_scale: float,
                     row_l2: float) -> IdTable:
    """`id_table`, with L2 on the rows each training batch looks up when row_l2 > 0."""
    if row_l2 <= 0:
        return id_table(number, width, sparse, init_scale)
    table = DecayedIdTable(number, width, sparse=sparse, weight_attr=paddle.ParamAttr(
        initializer=nn.initializer.Uniform(-init_scale, init_scale)))
    table.row_l2 = row_l2
    return table


class FieldInputs(NamedTuple):
    deep: paddle.Tensor  # [B, fields * dim + num_dense]: the latent vectors, then the dense
    wide: paddle.Tensor | None  # [B, 1]: the fields' first-order weights' sum (first_order)
    latent: paddle.Tensor  # [B, fields, dim]


class FieldNet(nn.Layer):
    """The frame of a zoo model that embeds each field in `sparse_feature_dim` columns: it
    keeps `inputs`, that width (`dim`) and the caller's id table (`self.embedding`, the name
    checkpoints hold). first_order: each table row carries one more column after the latent
    vector, the id's first-order (wide) weight: one lookup and one sparse update, not two."""

    first_order = False

    @classmethod
    def table_width(cls, cfg: Any) -> int:
        return cfg.sparse_feature_dim + int(cls.first_order)

    def __init__(self, cfg: Any, inputs: Any, table: nn.Layer) -> None:
        super().__init__()
        self.inputs = inputs
        self.dim = cfg.sparse_feature_dim
        self.embedding = table

    def field_inputs(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> FieldInputs:
        """What a field model reads from its table and dense features (FieldInputs). Training
        in dygraph with single-valued fields, one fused kernel makes all of it from the
        batch's distinct rows (recrunner/kernels); otherwise the plain lookup and layers."""
        table = self.embedding
        if (self.training and self.inputs.pad_id is None and isinstance(table, IdTable)
                and table._sparse and paddle.in_dynamic_mode() and _fused_kernels()):
            index, rows = table.distinct_rows(sparse_ids)
            deep, wide, latent = _fused_fields(rows, paddle.to_tensor(index), dense, self.dim)
            return FieldInputs(deep, wide if self.first_order else None, latent)
        rows = embed_fields(table, sparse_ids, self.inputs)  # [B, fields, width]
        if not self.first_order:
            return FieldInputs(self.flat(rows, dense), None, rows)
        latent, weight = split_rows(rows, self.dim)
        return FieldInputs(self.flat(latent, dense), paddle.sum(weight, axis=1, keepdim=True),
                           latent)

    def flat(self, latent: paddle.Tensor, dense: paddle.Tensor) -> paddle.Tensor:
        """[B, fields, dim] field rows as [B, fields * dim], then the dense features: an MLP's
        or cross network's input."""
        x = paddle.reshape(latent, [-1, self.inputs.num_fields * self.dim])
        return paddle.concat([x, dense], axis=1) if self.inputs.num_dense else x


class WideCrosses(nn.Layer):
    """The Wide & Deep paper's cross-product transformations, for any model's logit: each
    listed pair of single-valued fields gets a weight per (id, id) pair, hashed into `buckets`
    rows of its own sparse table (an embedding model's dim-d vectors cannot hold an arbitrary
    weight per pair: docs/models.md). forward(sparse_ids) -> [B, 1], the sum over the pairs.

    `lr_scale` multiplies the optimizer's table rate for this table only (Paddle's per-parameter
    rate): per-pair weights seen a few dozen times have to grow far from 0, faster than the
    embeddings should move. (The table is a member, not a base class: a subclass's super()
    calls recurse forever when the export converts them to a static graph.)"""

    def __init__(self, inputs: Any, pairs: list[list[str]], buckets: int, sparse: bool,
                 init_scale: float, lr_scale: float = 1.0) -> None:
        super().__init__()
        self.columns = [cross_columns(inputs, pair) for pair in pairs]
        self.buckets = buckets
        self.lookup = IdTable(buckets, 1, sparse=sparse, weight_attr=paddle.ParamAttr(
            initializer=nn.initializer.Uniform(-init_scale, init_scale), learning_rate=lr_scale))

    def forward(self, sparse_ids: paddle.Tensor) -> paddle.Tensor:
        # int64 tensors, not Python ints: a scalar product becomes a float32 scale op when
        # exported, which rounds the keys (the export check caught it: 0.03 off).
        multiplier = paddle.full([1], CROSS_MULTIPLIER, "int64")
        keys = [paddle.multiply(sparse_ids[:, a], multiplier) + sparse_ids[:, b]
                for a, b in self.columns]
        ids = paddle.remainder(paddle.stack(keys, axis=1),
                               paddle.full([1], self.buckets, "int64"))
        return paddle.sum(self.lookup(ids), axis=1)  # [B, pairs, 1] -> [B, 1]


def wide_crosses(cfg: Any, inputs: Any) -> WideCrosses | None:
    """The block a model's config asks for (`model.wide_crosses`, `wide_cross_buckets`,
    `wide_cross_lr_scale`; models/rank/wide_cross.py checks them), or None for no pairs."""
    if not cfg.wide_crosses:
        return None
    return WideCrosses(inputs, cfg.wide_crosses, cfg.wide_cross_buckets, cfg.sparse_grad,
                       cfg.init_scale, cfg.wide_cross_lr_scale)


def cross_columns(inputs: Any, pair: list[str]) -> tuple[int, int]:
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
