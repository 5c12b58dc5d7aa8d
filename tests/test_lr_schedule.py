"""runner.table_learning_rate, runner.lr_decay and runner.table_lr_decay: each part's Adam
rate, per epoch."""

from typing import Any

import numpy as np
import pytest

from recrunner.runtime import import_paddle
from recrunner.train import optim
from recrunner.zoo.rank.blocks import id_table

paddle = import_paddle()


class TinyNet(paddle.nn.Layer):  # type: ignore[name-defined]
    def __init__(self) -> None:
        super().__init__()
        self.table = id_table(10, 2, True, 0.5)
        self.dense = paddle.nn.Linear(2, 1)

    def forward(self, ids: Any) -> Any:
        return self.dense(self.table(ids).sum(axis=1))


def first_step(epoch: int, learning_rate: float, table_learning_rate: float | None = None,
               decays: dict[str, float] | None = None, host_tables: bool = False
               ) -> tuple[np.ndarray, np.ndarray]:
    """How far one Adam step in `epoch` moves the table's rows and the dense weights."""
    paddle.seed(0)
    net = TinyNet()
    opt = optim.Adam(paddle, net, learning_rate, table_learning_rate, decays,
                     host_tables=host_tables)
    opt.start_epoch(epoch)
    table, dense = net.table.weight.numpy().copy(), net.dense.weight.numpy().copy()
    net(paddle.to_tensor(np.array([[4, 7]], "int64"))).sum().backward()
    opt.step()
    return (np.abs(net.table.weight.numpy() - table),
            np.abs(net.dense.weight.numpy() - dense))


@pytest.mark.parametrize("host_tables", [False, True], ids=["paddle-tables", "host-tables"])
@pytest.mark.parametrize("epoch", [1, 3])
def test_each_part_moves_by_its_own_decayed_rate(epoch: int, host_tables: bool) -> None:
    """Adam's step is proportional to its rate: the table's rows move by
    table_learning_rate * its decay^(epoch-1), the dense weights by learning_rate * theirs."""
    table_ref, dense_ref = first_step(1, learning_rate=0.001, host_tables=host_tables)
    table, dense = first_step(epoch, learning_rate=0.01, table_learning_rate=0.001,
                              decays={"dense": 0.5, "tables": 0.25}, host_tables=host_tables)
    np.testing.assert_allclose(table[[4, 7]], table_ref[[4, 7]] * 0.25 ** (epoch - 1),
                               rtol=1e-3)
    assert table[[4, 7]].min() > 0 and not table[[0, 1, 2, 3, 5, 6, 8, 9]].any()  # lazy
    np.testing.assert_allclose(dense, dense_ref * 10 * 0.5 ** (epoch - 1), rtol=1e-3)


@pytest.mark.parametrize("host_tables", [False, True], ids=["paddle-tables", "host-tables"])
def test_a_table_decay_of_zero_freezes_the_tables_after_epoch_1(host_tables: bool) -> None:
    table, dense = first_step(2, learning_rate=0.01, decays={"dense": 1.0, "tables": 0.0},
                              host_tables=host_tables)
    assert not table.any() and dense.min() > 0


def test_the_default_schedule_and_what_each_key_replaces() -> None:
    from recrunner.config.compose import load

    def decays(*overrides: str) -> dict[str, float]:
        return optim.epoch_decays(load(list(overrides)).runner)

    assert decays() == optim.DEFAULT_DECAYS == {"dense": 0.01, "tables": 0.1}
    assert decays("runner.online=true", "dataset.train=x/day=*") == \
        {"dense": 1.0, "tables": 1.0}  # a pass is new data
    assert decays("runner.lr_decay=0.5") == {"dense": 0.5, "tables": 0.5}
    assert decays("runner.table_lr_decay=0") == {"dense": 0.01, "tables": 0.0}
    assert decays("runner.lr_decay=0.5", "runner.table_lr_decay=1") == \
        {"dense": 0.5, "tables": 1.0}


def test_ps_mode_refuses_the_schedule_and_bad_values_fail_at_load() -> None:
    from recrunner.commands.train import check
    from recrunner.config.compose import load
    from recrunner.errors import RecrunnerError

    for override in ("runner.lr_decay=0.5", "runner.table_learning_rate=0.01",
                     "runner.table_lr_decay=0"):
        key = override.split("=")[0]
        with pytest.raises(RecrunnerError, match=f"^{key} applies to mode=local and mode=coll"
                                                 ".*mode=ps's servers keep one constant rate"):
            check(load(["mode=ps", "model=lr", override]))
    for override, message in (("runner.lr_decay=1.5", "runner.lr_decay=1.5 must be between"),
                              ("runner.lr_decay=0", "runner.lr_decay=0.0 must be greater"),
                              ("runner.table_lr_decay=-0.1", "table_lr_decay=-0.1 must be "
                                                             "between 0.0 and 1.0"),
                              ("runner.table_lr_decay=2", "table_lr_decay=2.0 must be between"),
                              ("runner.table_learning_rate=-1", "table_learning_rate=-1.0")):
        with pytest.raises(Exception, match=message):
            load([override])


def test_ps_mode_says_in_one_line_that_it_keeps_its_rates(
        synth_data: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    from recrunner.commands.train import check
    from recrunner.config.compose import load
    from tests.conftest import data_overrides

    said = "recrun train: warning: mode=ps trains every epoch at the same rates"
    check(load(["mode=ps", "model=lr", *data_overrides(synth_data)]))  # 2 epochs by default
    assert capsys.readouterr().err.count(said) == 1
    for one_rate in (["mode=ps", "runner.epochs=1"], ["mode=local"]):
        check(load([*one_rate, "model=lr", *data_overrides(synth_data)]))
        assert said not in capsys.readouterr().err, one_rate


@pytest.mark.parametrize("overrides, dense, tables", [
    ([], 0.01, 0.1),  # the default schedule
    (["runner.lr_decay=1"], 1.0, 1.0),
    (["runner.online=true"], 1.0, 1.0),  # passes keep their rates
])
def test_the_engine_of_local_and_collective_trains_epoch_2_at_the_schedule(
        synth_data: dict[str, str], overrides: list[str], dense: float, tables: float) -> None:
    """mode=local and mode=collective train with DygraphEngine: its optimizer's epoch-2
    rates are each part's rate times the configured schedule's factor."""
    from recrunner.config.compose import load
    from recrunner.data.reader import Shard
    from recrunner.train.dygraph import DygraphEngine
    from recrunner.train.group import LocalGroup
    from recrunner.train.reading import Reader
    from tests.conftest import SMALL_MODEL, data_overrides

    cfg = load([*SMALL_MODEL, *data_overrides(synth_data), *overrides])
    engine = DygraphEngine(cfg, LocalGroup(), Reader(cfg, Shard()))
    engine.opt.start_epoch(2)
    rates = {name: part.get_lr() if hasattr(part, "get_lr") else part.lr
             for name, part in engine.opt.parts.items()}
    rate = cfg.runner.learning_rate
    assert rates == pytest.approx({"dense": dense * rate, "tables": tables * rate}, rel=1e-9)
