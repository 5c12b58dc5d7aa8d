"""mode=ps's servers and trainers are configured with mode=local's update rule."""

import math

import pytest

from recrunner.config.compose import load
from recrunner.fleet.ps_tables import (
    CLIENT_GFLAGS,
    ps_table_configs,
    table_shards,
    trainer_optimizer,
)

OVERRIDES = ["mode=ps", "runner.learning_rate=0.0037", "model.init_scale=0.023",
             "model.sparse_feature_number=1001", "model.sparse_feature_dim=4",
             "model.fc_sizes=[8]"]


@pytest.fixture(scope="module")
def local_adam():
    """mode=local's optimizer parts (lazy Adam on the table, Adam on the rest)."""
    import paddle

    from recrunner.train import optim
    from recrunner.train.build import build_net

    cfg = load(OVERRIDES)
    return optim.Adam(paddle, build_net(cfg), cfg.runner.learning_rate).parts


def test_server_table_rule_is_local_lazy_adam(local_adam) -> None:
    from paddle.distributed import fleet

    cfg = load(OVERRIDES)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    strategy.sparse_table_configs = ps_table_configs(cfg, "emb", 7)
    (table,) = strategy.sparse_table_configs  # what the_one_ps reads back
    assert table.table_name == "emb" and table.table_class == "MemorySparseTable"
    assert table.shard_num == 7  # not fleet's default 1000 (a file each per checkpoint)
    acc = table.accessor
    assert acc.accessor_class == "SparseAccessor"
    assert acc.embedx_threshold == 0  # every column trains from a row's first push
    assert acc.ctr_accessor_param.zero_init is False  # all columns Uniform, as local
    assert acc.ctr_accessor_param.show_click_decay_rate == 1.0
    assert acc.ctr_accessor_param.delete_threshold == 0.0
    local = local_adam["tables"]
    assert local._lazy_mode
    for rule in (acc.embed_sgd_param, acc.embedx_sgd_param):
        assert rule.name == "SparseAdamSGDRule"
        adam = rule.adam
        # A row's first update equals local lazy Adam's late in training (per-row bias
        # correction on the servers, global-step correction locally).
        first_local = local.get_lr() * (1 - local._beta1) / math.sqrt(1 - local._beta2)
        assert math.isclose(adam.learning_rate, first_local, rel_tol=1e-6)
        assert math.isclose(adam.beta1_decay_rate, local._beta1, rel_tol=1e-6)
        assert math.isclose(adam.beta2_decay_rate, local._beta2, rel_tol=1e-6)
        assert math.isclose(adam.ada_epsilon, local._epsilon, rel_tol=1e-6)
        assert math.isclose(adam.initial_range, cfg.model.init_scale, rel_tol=1e-6)
        assert adam.weight_bounds[0] < -1e30 and adam.weight_bounds[1] > 1e30  # no clipping


@pytest.mark.parametrize(("overrides", "rate_share"), [
    (["mode.trainers=1"], 1.0), (["mode.trainers=4"], 0.25),  # async: rate / trainers
    (["mode.trainers=4", "mode.sync_mode=geo"], 1.0)])  # geo: the trainers' own copies
def test_trainer_optimizer_is_local_adam(local_adam, overrides: list[str],
                                         rate_share: float) -> None:
    import paddle

    cfg = load([*OVERRIDES, *overrides])
    paddle.enable_static()  # fleet builds it in static mode
    try:
        opt = trainer_optimizer(paddle, cfg)
    finally:
        paddle.disable_static()
    for local in local_adam.values():
        assert math.isclose(opt.get_lr(), local.get_lr() * rate_share)
        assert (opt._beta1, opt._beta2, opt._epsilon) == (local._beta1, local._beta2,
                                                          local._epsilon)
    assert opt._lazy_mode  # geo trainers update only the rows a batch touched, as local


def test_client_pushes_every_batch() -> None:
    """The servers take one Adam step per batch: the clients' push threads neither wait for
    12 batches of dense gradients nor sum more than what queued within a millisecond."""
    flags = CLIENT_GFLAGS.split()
    for flag in ("-pserver_push_sparse_merge_limit=0", "-pserver_push_dense_merge_limit=0",
                 "-pserver_async_push_sparse_interval_ms=1",
                 "-pserver_async_push_dense_interval_ms=1"):
        assert flag in flags


def test_more_trainers_than_cores_is_warned_of() -> None:
    from recrunner.fleet.ps import oversubscribed

    crowded = oversubscribed(load(["mode=ps", "mode.trainers=4", "mode.sync_mode=geo"]), 2)
    assert crowded is not None and "mode.trainers=4 on 2 core(s)" in crowded
    assert "geo trainers" in crowded and "\n" not in crowded
    assert oversubscribed(load(["mode=ps", "mode.trainers=2", "mode.sync_mode=geo"]), 2) is None
    # Async with more trainers than cores trails local about as much as without contention.
    assert oversubscribed(load(["mode=ps", "mode.trainers=4"]), 2) is None
    assert oversubscribed(load(["mode=collective", "mode.nproc=4"]), 2) is None


@pytest.mark.parametrize(("overrides", "shards"), [
    (["model.sparse_feature_number=1000001"], 101),  # one shard per 10,000 rows
    (["model.sparse_feature_number=10007"], 2),
    (["model.sparse_feature_number=1001", "mode.servers=3"], 3),  # one per server at least
    (["model.sparse_feature_number=100000001"], 1000),
])
def test_the_table_is_sharded_by_its_size(overrides: list[str], shards: int) -> None:
    assert table_shards(load(["mode=ps", *overrides])) == shards


def test_a_resumed_job_keeps_its_checkpoints_table_shards(tmp_path) -> None:
    """Servers load a table only into as many shards as it was saved in: a run saved with
    fleet's default 1000 shards resumes with 1000; a fresh run uses table_shards."""
    import json

    from recrunner.fleet.ps import resume_table_shards

    run = tmp_path / "run"
    cfg = load(["mode=ps", "model.sparse_feature_number=10007", f"runner.output_dir={run}",
                "runner.resume=true"])
    assert resume_table_shards(cfg) == 2  # nothing to resume
    ckpt = run / "checkpoints" / "1"
    ckpt.mkdir(parents=True)
    (ckpt / "state.json").write_text(json.dumps({"epoch": 1, "ps_tables": "1.ps"}))
    tables = run / "checkpoints" / "1.ps" / "000"
    tables.mkdir(parents=True)
    for shard in range(1000):
        (tables / f"part-000-{shard:05d}.gz").touch()
    assert resume_table_shards(cfg) == 1000
    # Servers set up with another count refuse the checkpoint in one line, naming it.
    from recrunner.fleet.ps import check_table_shards
    from recrunner.fleet.roles import DistError
    from recrunner.train.checkpoint import latest

    ckpt = latest(run)
    assert ckpt is not None
    check_table_shards(ckpt, 1000)
    with pytest.raises(DistError, match=r"holds its table in 1000 shards and the servers were "
                                        r"set up for 2"):
        check_table_shards(ckpt, 2)
    fresh = load(["mode=ps", "model.sparse_feature_number=10007", f"runner.output_dir={run}"])
    assert resume_table_shards(fresh) == 2  # not resuming: the size decides



def test_a_restore_that_is_not_the_checkpoints_model_fails(tmp_path) -> None:
    import numpy as np

    from recrunner.fleet.ps import check_restored
    from recrunner.fleet.roles import DistError
    from recrunner.train.checkpoint import Checkpoint

    rng = np.random.default_rng(0)
    saved = {"embedding.weight": rng.uniform(-0.05, 0.05, (100, 1, 8)).astype(np.float32),
             "deep.0.bias": np.zeros(4, np.float32)}
    ckpt = Checkpoint(tmp_path / "1", 1, {})
    # As the servers load their text tables: 6 significant digits.
    loaded = {k: np.array([float(f"{x:.6g}") for x in v.reshape(-1)], np.float32).reshape(
        v.shape) for k, v in saved.items()}
    check_restored(ckpt, saved, {**loaded, "embedding.weight": loaded["embedding.weight"][:, 0]})
    fresh = {**loaded, "embedding.weight": rng.uniform(-0.05, 0.05, (100, 8))}
    with pytest.raises(DistError, match=r"restored from .*/1 is not the one it saved: "
                                        r"embedding.weight differs by"):
        check_restored(ckpt, saved, fresh)
    with pytest.raises(DistError, match="deep.0.bias"):
        check_restored(ckpt, saved, {**loaded, "deep.0.bias": np.full(4, 1e-3, np.float32)})
