"""mode=ps trains with mode=local's update rule: the servers' and clients' configuration.

mode=local trains the embedding table with lazy Adam and the dense parameters with Adam, both
at runner.learning_rate with Paddle's default betas and epsilon, the table initialised
Uniform(-model.init_scale, model.init_scale) (recrunner/train/optim.py, models/rank/blocks.py).
`configure_strategy` gives the PS job the same: the servers' table rule (fleet's
`sparse_table_configs`), the optimizer the dense table (C++ DAdam, betas and epsilon built in)
and geo's trainers take their rate from, and the client settings under which every batch's
gradients reach the servers as one step each. What Paddle 3.0 cannot match (per-row Adam bias
correction, the dense table's beta powers; measured to cost nothing) is in docs/distributed.md.
"""

import os
from typing import Any

from recrunner.config.schema import RootConfig
from recrunner.train import optim
from recrunner.train.build import table_rows

# No clipping: mode=local bounds no weight (the accessor's default is [-10, 10]).
NO_BOUND = 3.0e38
# The servers' Adam bias-corrects each row by its own update count, mode=local's lazy Adam by
# the global step (Paddle 3.0's rules have no global-step mode). The rule itself costs nothing:
# mode=local trained with the servers' per-row rule scores local's AUC (40k rows: 0.8327 at
# this scale or at 1x, vs 0.8332). On the servers, async, a rate scaled by (1 - beta1) /
# sqrt(1 - beta2) (a row's first update then equals local's late in training) is steadier with
# 1-2 trainers (40k rows, 2 trainers: 0.828-0.830 in 4 runs vs 0.808-0.829 at 1x; local 0.833),
# but costs 0.015-0.018 with 4 trainers (0.795 vs 0.810): docs/distributed.md.
FIRST_TOUCH_SCALE = (1 - optim.BETA1) / (1 - optim.BETA2) ** 0.5


# The servers split the table into shards, each saved as a gzip file of its own. fleet's
# default, 1000, spent 4.5 s (8 s beside another job) of every checkpoint of the test matrix's
# 10k-row table opening and closing files; one shard per SHARD_ROWS rows keeps a million-row
# table at 100 (docs/distributed.md, "Start-up and checkpoint cost").
SHARD_ROWS = 10_000
MAX_SHARDS = 1000


# Paddle's save modes (SparseAccessor::Save and UpdateStatAfterSave, Paddle 3.0): 0 every row;
# 1 the "delta", rows pushed since the last mode-1 save (their delta score, which every push
# raises, at least delta_threshold; the save resets it); 3 every row, then each row's unseen
# days + 1 (a push sets them to 0; shrink deletes rows over delete_after_unseen_days).
SAVE_ALL, SAVE_DELTA, SAVE_PASS = 0, 1, 3
TABLE_ID = 0  # the id table's, among the servers' tables (saved as <dir>/000/)
# Online passes: any push puts a row in the next delta (a push adds its show count times
# nonclk_coeff, 0.1, or more), and nothing but eviction deletes a row.
DELTA_THRESHOLD = 1e-6
NEVER_DAYS = 1e9


def table_shards(cfg: RootConfig) -> int:
    """The table's shard count: by its size, at least one per server."""
    return min(MAX_SHARDS, max(cfg.mode.servers, -(-table_rows(cfg) // SHARD_ROWS)))


def ps_table_configs(cfg: RootConfig, table: str, shards: int) -> dict[str, dict[str, Any]]:
    """fleet's sparse_table_configs for `table`: lazy Adam as in mode=local, in `shards`."""
    acc = f"table_parameters.{table}.accessor"
    adam = {"learning_rate": cfg.runner.learning_rate * FIRST_TOUCH_SCALE,
            "initial_range": cfg.model.init_scale,
            "beta1_decay_rate": optim.BETA1, "beta2_decay_rate": optim.BETA2,
            "ada_epsilon": optim.EPSILON, "weight_bounds": [-NO_BOUND, NO_BOUND]}
    conf: dict[str, Any] = {
        f"table_parameters.{table}.table_class": "MemorySparseTable",
        f"table_parameters.{table}.shard_num": shards,
        f"{acc}.accessor_class": "SparseAccessor",
        # Train every column of a row from its first push (no show/click gating).
        f"{acc}.embedx_threshold": 0,
        # Every column random, as mode=local's Uniform init (default: column 0 at zero).
        f"{acc}.ctr_accessor_param.zero_init": False,
        # Never decay show/click or drop rows.
        f"{acc}.ctr_accessor_param.show_click_decay_rate": 1.0,
        f"{acc}.ctr_accessor_param.delete_threshold": 0.0,
    }
    if cfg.runner.online:
        conf.update(online_accessor(cfg, f"{acc}.ctr_accessor_param"))
    for rule in ("embed_sgd_param", "embedx_sgd_param"):
        conf[f"{acc}.{rule}.name"] = "SparseAdamSGDRule"
        conf.update({f"{acc}.{rule}.adam.{k}": v for k, v in adam.items()})
    return {table: conf}


def online_accessor(cfg: RootConfig, param: str) -> dict[str, Any]:
    """The accessor's statistics for online passes (recrunner.online.tables): every pushed
    row in the pass's delta; with model.evict_after_passes=N, shrink deletes the rows not
    pushed for N passes. Each pass saves with mode 3 once (its checkpoint) and shrinks before
    it, so a row last pushed in pass p has n - p unseen days at pass n's shrink, deleted when
    over N - 1: when p <= n - N, as mode=local evicts."""
    evict = int(getattr(cfg.model, "evict_after_passes", 0))
    return {f"{param}.base_threshold": 0.0,
            f"{param}.delta_threshold": DELTA_THRESHOLD,
            f"{param}.delta_keep_days": NEVER_DAYS,
            f"{param}.delete_after_unseen_days": float(evict - 1) if evict else NEVER_DAYS}


def dense_rate(cfg: RootConfig) -> float:
    """The dense parameters' Adam rate. async: runner.learning_rate / mode.trainers on the
    servers. Each trainer computes its gradient on dense parameters that the other trainers'
    pushes (about trainers - 1 of them, all from the same stale values) have moved since its
    pull; Adam steps each push by about the rate whatever the gradient's size, so those
    pushes overshoot together and the model oscillates. Dividing the rate by the trainers
    (the usual staleness-aware rule) measured, 200k rows, one epoch (local 0.8260): 4 trainers
    0.711-0.809 in 5 runs -> 0.806-0.8155 in 7; 2 trainers 0.8143-0.8147 -> 0.8178-0.8190
    (docs/distributed.md). The table's rate stays (ps_table_configs): most rows are pushed by
    one trainer at a time, and a lower table rate measured worse (4 trainers, x1 instead of
    FIRST_TOUCH_SCALE: 0.8043-0.8096). geo: the trainers' own copies, at local's rate."""
    if cfg.mode.sync_mode == "geo":
        return cfg.runner.learning_rate
    return cfg.runner.learning_rate / cfg.mode.trainers


def trainer_optimizer(paddle: Any, cfg: RootConfig) -> Any:
    """The optimizer fleet distributes. async: the servers' dense table takes its rate (C++
    DAdam has mode=local's betas and epsilon built in); geo: trainers run it on their own
    copies, lazily on the table's rows as mode=local (a plain Adam would update all 1M rows
    every step)."""
    return paddle.optimizer.Adam(learning_rate=dense_rate(cfg), beta1=optim.BETA1,
                                 beta2=optim.BETA2, epsilon=optim.EPSILON, lazy_mode=True)


# brpc flags the client's configuration (PSParameter.init_gflags) replaces when set
# (Communicator::InitGFlag's defaults), plus the ones that decide what the servers' optimizers
# see (BrpcPsClient's push threads, brpc_ps_client.cc). Each trainer's client queues every
# batch's gradients; a push thread wakes every `pserver_async_push_*_interval_ms` (default 10)
# and sends:
# - table gradients: with `pserver_push_sparse_merge_limit` 12 (default), the sum of about 12
#   batches; with 0, the sum of whatever queued since the last wake-up (a 256-row batch takes
#   a few ms: 2-4 batches merged at 10 ms, about one at 1 ms);
# - dense gradients: with `pserver_push_dense_merge_limit` 12 (default), nothing until 13
#   batches queued, then their sum as one push; with 0, one batch per wake-up, and a trainer
#   with more than `pserver_max_async_call_num` pushes queued waits (at 10 ms: <= 100 batches
#   a second).
# Either sum is one Adam step on the servers for many batches: the dense parameters took one
# step per ~13 batches, moved ~3x less than mode=local's and the model lost 0.03-0.05 AUC
# (docs/distributed.md). 0 and 1 ms make the servers step once per batch, as mode=local.
CLIENT_GFLAGS = ("-max_body_size=314217728 -bthread_concurrency=40 "
                 "-socket_max_unwritten_bytes=2048000000 -max_connection_pool_size=1950 "
                 "-pserver_push_sparse_merge_limit=0 -pserver_push_dense_merge_limit=0 "
                 "-pserver_async_push_sparse_interval_ms=1 "
                 "-pserver_async_push_dense_interval_ms=1")


def install_client_gflags(gflags: str = CLIENT_GFLAGS) -> None:
    """Make the_one_ps put `gflags` into the worker configuration it hands the C++ client
    (FleetWrapper::InitWorker parses them); fleet's Python API has no setting for it."""
    from paddle.distributed.ps import the_one_ps

    builder = the_one_ps.PsDescBuilder
    if getattr(builder.build_worker_desc, "recrun_gflags", None) == gflags:
        return
    build = getattr(builder.build_worker_desc, "__wrapped__", builder.build_worker_desc)

    def build_worker_desc(self: Any) -> str:
        self.ps_desc.init_gflags = gflags
        return build(self)

    build_worker_desc.__wrapped__ = build  # type: ignore[attr-defined]
    build_worker_desc.recrun_gflags = gflags  # type: ignore[attr-defined]
    # Deliberate monkeypatch of a Paddle internal (the worker desc has no gflags hook).
    builder.build_worker_desc = build_worker_desc  # type: ignore[method-assign]


# The async communicator's settings, which Paddle takes from the environment
# (distributed/ps/utils/public.py, TrainerRuntimeConfig). Its receive thread refreshes a
# trainer's dense parameters only after more than this many pushes (default 1: every second
# batch); 0 pulls after every push, so trainers compute on fresher dense parameters.
COMMUNICATOR_ENV = {"FLAGS_communicator_min_send_grad_num_before_recv": "0"}


def configure_strategy(strategy: Any, cfg: RootConfig, table: str, shards: int) -> None:
    """Set up `strategy` (and this process's fleet client) to train as mode=local does, the
    table in `shards` (ps.resume_table_shards)."""
    strategy.a_sync = True
    if cfg.mode.sync_mode == "geo":
        strategy.a_sync_configs = {"k_steps": cfg.mode.geo_k_steps}
        return
    strategy.sparse_table_configs = ps_table_configs(cfg, table, shards)
    install_client_gflags()
    for key, value in COMMUNICATOR_ENV.items():
        os.environ.setdefault(key, value)  # an explicit setting in the environment wins
