"""The model blocks' fast training paths compute what the plain Paddle layers compute."""

import numpy as np
import pytest

from recrunner.errors import RecrunnerError
from recrunner.runtime import import_paddle
from recrunner.train import optim
from recrunner.zoo.rank.blocks import IdTable, Linear, split_rows

paddle = import_paddle()


def grads(params: list) -> list[np.ndarray]:
    return [p.grad.numpy().copy() for p in params]


def test_linear_training_path_matches_nn_linear() -> None:
    paddle.seed(1)
    fast = Linear(7, 5)
    plain = paddle.nn.Linear(7, 5)
    plain.set_state_dict(fast.state_dict())
    fast.bias.set_value(paddle.rand([5]))  # a zero bias would hide a broken bias path
    plain.bias.set_value(fast.bias)
    x = paddle.rand([6, 7])
    outputs = []
    for layer in (fast, plain):
        layer.train()
        out = layer(x)
        (out * paddle.arange(30, dtype="float32").reshape([6, 5])).sum().backward()
        outputs.append((out.numpy(), grads([layer.weight, layer.bias])))
    np.testing.assert_allclose(outputs[0][0], outputs[1][0], rtol=1e-6, atol=1e-6)
    for a, b in zip(outputs[0][1], outputs[1][1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_split_rows_matches_slicing() -> None:
    rows = paddle.rand([4, 3, 6])
    rows.stop_gradient = False
    latent, weight = split_rows(rows, 5)
    np.testing.assert_array_equal(latent.numpy(), rows.numpy()[:, :, :5])
    np.testing.assert_array_equal(weight.numpy(), rows.numpy()[:, :, 5])
    (latent.sum() * 2 + weight.sum() * 3).backward()
    expected = np.concatenate([np.full([4, 3, 5], 2.0), np.full([4, 3, 1], 3.0)], axis=2)
    np.testing.assert_array_equal(rows.grad.numpy(), expected)


def test_id_table_training_lookup_and_update_match_nn_embedding() -> None:
    paddle.seed(2)
    fast = IdTable(50, 4, sparse=True)
    plain = paddle.nn.Embedding(50, 4, sparse=True)
    plain.set_state_dict(fast.state_dict())
    before = fast.weight.numpy().copy()
    ids = paddle.to_tensor(np.array([[7, 3, 7], [49, 3, 0]], dtype="int64"))
    scale = paddle.rand([2, 3, 4])
    for layer in (fast, plain):
        opt = paddle.optimizer.SGD(learning_rate=0.5, parameters=layer.parameters())
        out = layer(ids)
        (out * scale).sum().backward()
        opt.step()
    np.testing.assert_allclose(fast.weight.numpy(), plain.weight.numpy(), rtol=1e-6)
    moved = np.flatnonzero(np.abs(fast.weight.numpy() - before).sum(axis=1))
    assert moved.tolist() == [0, 3, 7, 49]


def test_adam_splits_sparse_tables_from_dense_parameters() -> None:
    class Net(paddle.nn.Layer):  # type: ignore[name-defined]  # paddle: a ModuleType here
        def __init__(self) -> None:
            super().__init__()
            self.table = IdTable(100, 3, sparse=True)
            self.dense_table = paddle.nn.Embedding(10, 3)
            self.out = Linear(3, 1)

    net = Net()
    opt = optim.Adam(paddle, net, 0.01)
    assert [p.name for p in opt.parts["tables"]._parameter_list] == [net.table.weight.name]
    assert {p.name for p in opt.parts["dense"]._parameter_list} == {
        net.dense_table.weight.name, net.out.weight.name, net.out.bias.name}
    with pytest.raises(RecrunnerError, match="parts"):
        opt.set_state_dict({"dense": {}})


def test_linear_training_path_in_a_static_graph_matches_nn_linear() -> None:
    """mode=ps builds the net in a static graph, with a batch size known only when run."""
    paddle.enable_static()
    try:
        rng = np.random.default_rng(0)
        weight = rng.random((7, 5), dtype=np.float32)
        feed = {"x": rng.random((6, 7), dtype=np.float32)}
        results = []
        for cls in (Linear, paddle.nn.Linear):
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.static.program_guard(main, startup):
                x = paddle.static.data("x", [-1, 7], "float32")
                layer = cls(7, 5, weight_attr=paddle.ParamAttr(
                    initializer=paddle.nn.initializer.Assign(weight)), bias_attr=paddle.ParamAttr(
                    initializer=paddle.nn.initializer.Constant(0.5)))
                layer.train()
                out = layer(x)
                weights = paddle.arange(5, dtype="float32")
                loss = (out * weights).sum()
                grads = paddle.static.gradients([loss], [layer.weight, layer.bias])
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            results.append(exe.run(main, feed=feed, fetch_list=[out, *grads]))
    finally:
        paddle.disable_static()
    fast, plain = results
    np.testing.assert_allclose(fast[0], feed["x"] @ weight + 0.5, rtol=1e-5)
    for a, b in zip(fast, plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fast[2], 6 * np.arange(5), rtol=1e-6)  # 6 rows x loss weights


def test_embed_fields_pools_multi_valued_fields_without_their_padding() -> None:
    import paddle

    from recrunner.models import Field, ModelInputs
    from recrunner.zoo.rank.blocks import embed_fields, id_table

    pad = 9
    inputs = ModelInputs(0, (Field("a"), Field("tags", 3, "mean"), Field("hist", 2, "sum")), pad)
    table = id_table(10, 4, sparse=False, init_scale=0.5)
    ids = np.array([[1, 2, 3, pad, 4, 5],
                    [0, pad, pad, pad, pad, pad],  # empty lists pool to zeros
                    [7, 6, 6, 6, 8, pad]], np.int64)
    got = embed_fields(table, paddle.to_tensor(ids), inputs).numpy()
    w = table.weight.numpy()
    want = np.stack([
        np.stack([w[r[0]], w[[i for i in r[1:4] if i != pad]].mean(0) if (r[1:4] != pad).any()
                  else np.zeros(4), w[[i for i in r[4:6] if i != pad]].sum(0)
                  if (r[4:6] != pad).any() else np.zeros(4)]) for r in ids])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # Single-valued fields only: the lookup itself.
    single = ModelInputs(0, (Field("a"), Field("b")), None)
    np.testing.assert_array_equal(embed_fields(table, paddle.to_tensor(ids[:, :2]), single).numpy(),
                                  w[ids[:, :2]])
