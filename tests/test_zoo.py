"""The newer zoo models compute what their papers write, checked against numpy on tiny inputs
(training, export and serving of each are in test_one_model.py)."""

from itertools import combinations
from typing import Any

import numpy as np
import pytest

from recrunner.models import Field, ModelInputs, load_model_module, load_net_class
from recrunner.runtime import import_paddle
from recrunner.zoo.rank.blocks import decayed_id_table, id_table

paddle = import_paddle()
INPUTS = ModelInputs(3, (Field("a"), Field("b"), Field("c"), Field("d")))
B = 5


def build(name: str, inputs: ModelInputs = INPUTS, **overrides: Any) -> Any:
    paddle.seed(3)
    cfg = load_model_module(name).Config(sparse_feature_number=50, **overrides)
    net_class = load_net_class(name)
    net = net_class(cfg, inputs, id_table(50, net_class.table_width(cfg), True, 0.5))
    for p in net.parameters():  # random everywhere: zero biases would hide terms
        p.set_value(paddle.uniform(p.shape, min=-0.5, max=0.5))
    net.eval()
    return net


def batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.random((B, INPUTS.num_dense), np.float32),
            rng.integers(0, 50, (B, INPUTS.num_fields)).astype(np.int64))


def run(net: Any, dense: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return net(paddle.to_tensor(dense), paddle.to_tensor(ids)).numpy()


def test_lr_is_the_sum_of_weights_plus_a_linear_dense_part() -> None:
    net = build("lr")
    dense, ids = batch()
    table = net.embedding.weight.numpy()
    expected = table[ids, 0].sum(1) + dense @ net.dense.weight.numpy()[:, 0] + \
        net.dense.bias.numpy()[0]
    np.testing.assert_allclose(run(net, dense, ids)[:, 0], expected, rtol=1e-5, atol=1e-6)


def test_fm_sums_every_pair_of_fields_and_dense_features() -> None:
    net = build("fm", sparse_feature_dim=4)
    dense, ids = batch()
    table = net.embedding.weight.numpy()
    for row in range(B):
        vectors = [table[i, :4] for i in ids[row]] + [
            dense[row, j] * net.dense_latent.numpy()[j] for j in range(INPUTS.num_dense)]
        pairs = sum(float(u @ v) for u, v in combinations(vectors, 2))
        first = table[ids[row], 4].sum() + dense[row] @ net.first_order_dense.weight.numpy()[:, 0]
        expected = first + net.first_order_dense.bias.numpy()[0] + pairs
        np.testing.assert_allclose(run(net, dense, ids)[row, 0], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("low_rank", [0, 3])
def test_dcn_v2_cross_layers(low_rank: int) -> None:
    """x_{l+1} = x0 * (W x_l + b) + x_l (W = U V^T when low rank), stacked under the MLP."""
    net = build("dcn_v2", sparse_feature_dim=2, fc_sizes=[4], cross_num=2, low_rank=low_rank)
    dense, ids = batch()
    x0 = np.concatenate([net.embedding.weight.numpy()[ids].reshape(B, -1), dense], axis=1)
    x = x0
    for layer in net.cross:
        w = layer.up.weight.numpy()
        if low_rank:
            w = layer.down.weight.numpy() @ w
            assert layer.down.weight.shape == [x0.shape[1], low_rank]
        x = x0 * (x @ w + layer.up.bias.numpy()) + x
    hidden = np.maximum(x @ net.deep[0].weight.numpy() + net.deep[0].bias.numpy(), 0)
    expected = hidden @ net.deep[2].weight.numpy() + net.deep[2].bias.numpy()
    np.testing.assert_allclose(run(net, dense, ids), expected, rtol=1e-4, atol=1e-5)


def test_dcn_v2_parallel_concatenates_cross_and_deep() -> None:
    net = build("dcn_v2", sparse_feature_dim=2, fc_sizes=[4], structure="parallel")
    dense, ids = batch()
    width = INPUTS.num_fields * 2 + INPUTS.num_dense
    assert net.out.weight.shape == [width + 4, 1]
    assert run(net, dense, ids).shape == (B, 1)


def test_dropout_acts_in_training_only() -> None:
    net = build("dnn", sparse_feature_dim=2, fc_sizes=[64, 64], dropout=0.5)
    dense, ids = batch()
    evaluated = run(net, dense, ids)
    np.testing.assert_array_equal(evaluated, run(net, dense, ids))
    net.train()
    assert not np.allclose(run(net, dense, ids), evaluated)


def test_embedding_l2_decays_each_looked_up_row_once_per_step() -> None:
    paddle.seed(1)
    table = decayed_id_table(20, 3, True, 0.5, row_l2=0.5)
    before = table.weight.numpy().copy()
    ids = paddle.to_tensor(np.array([[3, 5, 3]], "int64"))
    opt = paddle.optimizer.SGD(learning_rate=1.0, parameters=table.parameters())
    table(ids).sum().backward()
    opt.step()
    expected = before.copy()
    expected[3] -= 2 + 0.5 * before[3]  # two occurrences' gradient, one decay
    expected[5] -= 1 + 0.5 * before[5]
    np.testing.assert_allclose(table.weight.numpy(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["lr", "fm", "dnn", "dcn_v2"])
def test_models_without_dense_features(name: str) -> None:
    """Schemas without dense features (Avazu's): the dense parts are left out."""
    net = build(name, ModelInputs(0, INPUTS.fields))
    _, ids = batch()
    out = run(net, np.zeros((B, 0), np.float32), ids)
    assert out.shape == (B, 1) and np.isfinite(out).all()
    if name == "lr":  # the bias stands in for the dense layer's
        expected = net.embedding.weight.numpy()[ids, 0].sum(1) + net.bias.numpy()[0]
        np.testing.assert_allclose(out[:, 0], expected, rtol=1e-5, atol=1e-6)


def test_embedding_l2_is_refused_in_ps_mode() -> None:
    from recrunner.commands.train import check
    from recrunner.config.compose import load
    from recrunner.errors import RecrunnerError

    with pytest.raises(RecrunnerError, match="mode=ps's tables live on the servers"):
        check(load(["mode=ps", "model=lr", "model.embedding_l2=0.1"]))
