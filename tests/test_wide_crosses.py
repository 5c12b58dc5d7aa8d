"""model.wide_crosses (models/rank/blocks.py WideCrosses): each crossed id pair adds its own wide
weight to the logit of every model that takes the block."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recrunner.errors import RecrunnerError
from recrunner.models import Field, ModelInputs, load_model_module, load_net_class
from recrunner.runtime import import_paddle
from recrunner.train.optim import Adam
from recrunner.zoo.rank.blocks import CROSS_MULTIPLIER, id_table
from tests.conftest import train_export

paddle = import_paddle()
INPUTS = ModelInputs(2, (Field("a"), Field("b"), Field("c")))
MODELS = ["wide_deep", "deepfm", "dcn_v2", "dnn"]


def build(crosses: list[list[str]], model: str = "wide_deep", inputs: ModelInputs = INPUTS,
          **keys: Any) -> Any:
    paddle.seed(3)
    cfg = load_model_module(model).Config(sparse_feature_number=50, sparse_feature_dim=2,
                                          fc_sizes=[4], wide_crosses=crosses,
                                          wide_cross_buckets=97, **keys)
    net_class = load_net_class(model)
    return net_class(cfg, inputs, id_table(50, net_class.table_width(cfg), True, 0.5))


def batch(rows: int = 6) -> tuple[Any, np.ndarray]:
    rng = np.random.default_rng(0)
    return paddle.to_tensor(rng.random((rows, 2), np.float32)), \
        rng.integers(0, 50, (rows, 3)).astype(np.int64)


@pytest.mark.parametrize("model", MODELS)
def test_a_crossed_pair_adds_the_weight_of_its_hashed_row(model: str) -> None:
    net = build([["a", "c"], ["b", "c"]], model)
    net.eval()
    dense, ids = batch()
    net.cross_table.lookup.weight.set_value(paddle.uniform([97, 1], min=-1.0, max=1.0))
    with_crosses = net(dense, paddle.to_tensor(ids)).numpy()[:, 0]
    weights = net.cross_table.lookup.weight.numpy()[:, 0]
    m = CROSS_MULTIPLIER
    expected_extra = (weights[(ids[:, 0] * m + ids[:, 2]) % 97]
                      + weights[(ids[:, 1] * m + ids[:, 2]) % 97])
    net.cross_table.lookup.weight.set_value(paddle.zeros([97, 1]))
    without = net(dense, paddle.to_tensor(ids)).numpy()[:, 0]
    assert np.abs(expected_extra).min() > 0
    np.testing.assert_allclose(with_crosses, without + expected_extra, rtol=1e-5, atol=1e-6)
    assert build([], model).cross_table is None


@pytest.mark.parametrize("model", MODELS)
def test_the_optimizer_moves_only_the_rows_of_the_batch_pairs_at_the_scaled_rate(
        model: str) -> None:
    """One training step with the runner's Adam (the cross table is a lazy sparse table): the
    touched rows move by about table rate * wide_cross_lr_scale (Adam's first step), no other
    row moves."""
    dense, ids = batch(64)
    moved = {}
    for scale in (1.0, 4.0):
        net = build([["a", "c"]], model, wide_cross_lr_scale=scale)
        net.train()
        before = net.cross_table.lookup.weight.numpy().copy()
        optimizer = Adam(paddle, net, learning_rate=0.001, table_learning_rate=0.01)
        optimizer.start_epoch(1)
        labels = paddle.to_tensor((ids[:, :1] % 2).astype(np.float32))
        loss = paddle.nn.functional.binary_cross_entropy_with_logits(
            net(dense, paddle.to_tensor(ids)), labels)
        loss.backward()
        optimizer.step()
        delta = np.abs(net.cross_table.lookup.weight.numpy() - before)[:, 0]
        touched = np.unique((ids[:, 0] * CROSS_MULTIPLIER + ids[:, 2]) % 97)
        untouched = np.setdiff1d(np.arange(97), touched)
        assert delta[untouched].max() == 0
        moved[scale] = np.median(delta[touched])
    assert 0.002 < moved[1.0] < 0.02
    assert moved[4.0] == pytest.approx(4 * moved[1.0], rel=0.05)


def test_crosses_name_single_valued_fields_and_are_refused_in_ps_mode() -> None:
    with pytest.raises(RecrunnerError, match="model.wide_crosses names 'z'"):
        build([["a", "z"]])
    with pytest.raises(RecrunnerError, match="names 'b'"):  # multi-valued
        build([["a", "b"]], "dcn_v2", ModelInputs(0, (Field("a"), Field("b", 3), Field("c")),
                                                  pad_id=0))
    with pytest.raises(ValueError, match="must be a list of \\[field, field\\] pairs"):
        build([["a"]], "deepfm")
    with pytest.raises(ValueError, match="model.wide_cross_lr_scale=0"):
        build([["a", "c"]], "dnn", wide_cross_lr_scale=0)
    from recrunner.commands.train import check
    from recrunner.config.compose import load

    with pytest.raises(RecrunnerError, match="model.wide_crosses applies to mode=local"):
        check(load(["mode=ps", "model=dcn_v2", "model.wide_crosses=[[C1,C2]]"]))


def test_a_model_with_crosses_trains_and_exports(synth_data: dict[str, str],
                                                 tmp_path: Path) -> None:
    """DCN-v2 with the default data's pair, one epoch on the tiny data: the cross weights grow
    from their init (+-0.01), and the export passes its self-check against the trained net."""
    import json

    # (With embedding_l2 too: its table's export once recursed forever.)
    export = train_export(synth_data, tmp_path, "model=dcn_v2", "model.wide_crosses=[[C1,C2]]",
                          "model.wide_cross_buckets=1009", "model.wide_cross_lr_scale=5",
                          "model.embedding_l2=0.0001")
    weights = paddle.load(str(tmp_path / "checkpoints" / "1" / "model.pdparams"))
    cross = weights["cross_table.lookup.weight"].numpy()
    assert cross.shape == (1009, 1) and np.abs(cross).max() > 0.05
    check = json.loads((export / "export.json").read_text())["check"]
    assert check["engines"] and all(e["ok"] for e in check["engines"].values())


def shipped_configs() -> list[Any]:
    """Every model's defaults and every preset (conf/experiment), as overrides."""
    from recrunner import CONF_DIR
    from recrunner.models import model_names

    data = ["dataset.train=x", "dataset.test=y"]  # the criteo presets ask for the user's files
    return [*(pytest.param(m, [f"model={m}"], id=f"model={m}") for m in model_names()),
            *(pytest.param(p.stem, [f"+experiment={p.stem}", *data], id=p.stem)
              for p in sorted((Path(CONF_DIR) / "experiment").glob("*.yaml")))]


@pytest.mark.parametrize("name, overrides", shipped_configs())
def test_no_default_or_preset_names_a_field_of_a_data_set(name: str,
                                                          overrides: list[str]) -> None:
    """Issue 28: an interaction is found by the model or from the data, never written into a
    shipped config by hand. No string in any model section is a field of a bundled schema."""
    import dataclasses

    import yaml

    from recrunner import CONF_DIR
    from recrunner.config.compose import load

    fields: set[str] = set()
    for schema in (Path(CONF_DIR) / "dataset" / "schema").glob("*.yaml"):
        spec = yaml.safe_load(schema.read_text())
        fields.update(str(f["name"]) for part in ("dense", "sparse") for f in spec.get(part, []))
    assert {"C1", "I13", "banner_pos"} <= fields

    def strings(value: Any) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, list | tuple):
            return [s for v in value for s in strings(v)]
        return []

    model = dataclasses.asdict(load(overrides).model)
    named = sorted(fields & set(strings(model)))
    assert not named, f"{name} names the fields {named}"
