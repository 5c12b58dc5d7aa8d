"""Wide & Deep's model.wide_crosses: each crossed id pair adds its own wide weight."""

from typing import Any

import numpy as np
import pytest

from recrunner.errors import RecrunnerError
from recrunner.models import Field, ModelInputs, load_model_module, load_net_class
from recrunner.runtime import import_paddle
from recrunner.zoo.rank.blocks import id_table
from recrunner.zoo.rank.wide_deep.net import CROSS_MULTIPLIER

paddle = import_paddle()
INPUTS = ModelInputs(2, (Field("a"), Field("b"), Field("c")))


def build(crosses: list[list[str]], inputs: ModelInputs = INPUTS) -> tuple[Any, Any]:
    paddle.seed(3)
    cfg = load_model_module("wide_deep").Config(sparse_feature_number=50, sparse_feature_dim=2,
                                                fc_sizes=[4], wide_crosses=crosses,
                                                wide_cross_buckets=97)
    net_class = load_net_class("wide_deep")
    return net_class(cfg, inputs, id_table(50, net_class.table_width(cfg), True, 0.5)), cfg


def test_a_crossed_pair_adds_the_weight_of_its_hashed_row() -> None:
    net, _ = build([["a", "c"], ["b", "c"]])
    net.eval()
    rng = np.random.default_rng(0)
    dense = rng.random((6, 2), np.float32)
    ids = rng.integers(0, 50, (6, 3)).astype(np.int64)
    net.cross_table.weight.set_value(paddle.uniform([97, 1], min=-1.0, max=1.0))
    with_crosses = net(paddle.to_tensor(dense), paddle.to_tensor(ids)).numpy()[:, 0]
    weights = net.cross_table.weight.numpy()[:, 0]
    m = CROSS_MULTIPLIER
    expected_extra = (weights[(ids[:, 0] * m + ids[:, 2]) % 97]
                      + weights[(ids[:, 1] * m + ids[:, 2]) % 97])
    net.cross_table.weight.set_value(paddle.zeros([97, 1]))
    without = net(paddle.to_tensor(dense), paddle.to_tensor(ids)).numpy()[:, 0]
    assert np.abs(expected_extra).min() > 0
    np.testing.assert_allclose(with_crosses, without + expected_extra, rtol=1e-5, atol=1e-6)


def test_crosses_name_single_valued_fields_and_are_refused_in_ps_mode() -> None:
    with pytest.raises(RecrunnerError, match="model.wide_crosses names 'z'"):
        build([["a", "z"]])
    with pytest.raises(RecrunnerError, match="names 'b'"):  # multi-valued
        build([["a", "b"]], ModelInputs(0, (Field("a"), Field("b", 3), Field("c")), pad_id=0))
    with pytest.raises(ValueError, match="must be a list of \\[field, field\\] pairs"):
        build([["a"]])
    from recrunner.commands.train import check
    from recrunner.config.compose import load

    with pytest.raises(RecrunnerError, match="model.wide_crosses applies to mode=local"):
        check(load(["mode=ps", "model.wide_crosses=[[C1,C2]]"]))


def test_the_default_data_preset_composes() -> None:
    from recrunner.config.compose import load

    cfg = load(["+experiment=synth_wide_deep"])
    assert cfg.model.name == "wide_deep" and cfg.model.wide_crosses == [["C1", "C2"]]
    assert (cfg.runner.table_learning_rate or 0) > cfg.runner.learning_rate
    assert cfg.runner.lr_decay < 1
