"""mode=ps: a parameter-server job (static graph, fleet `the_one_ps`).

Servers hold the embedding table and the dense parameters (with their Adam states); trainers
read their shard of pre-converted MultiSlot files through Paddle's C++ data feed
(`exe.train_from_dataset`), pull what a batch needs and push gradients (async, or geo).
The network is the model zoo's own dygraph Net, built in static mode with its embedding
replaced by the fleet's distributed lookup, so the export is that same Net filled with the
server's values and saved by recrunner.export.save_export: identical to a local export.
"""

import dataclasses
import json
import logging
import math
import os
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from recrunner.config.schema import RootConfig
from recrunner.data.errors import RowErrors
from recrunner.data.reader import Shard, iter_examples, rebatch, unshard
from recrunner.data.transform import NUM_DENSE, NUM_SPARSE
from recrunner.fleet.geo import load_geo_copies
from recrunner.fleet.ps_tables import configure_strategy, trainer_optimizer
from recrunner.fleet.roles import DistError, Role, check_port_free, wait_for_port
from recrunner.train import checkpoint
from recrunner.train.loop import build_net, model_fingerprint, preprocessor_for
from recrunner.train.metrics import evaluate_test_set
from recrunner.train.progress import Progress

log = logging.getLogger("recrunner.fleet")
TABLE = "sparse_embedding_table"
IDS_CHUNK = 100_000
INFER_PREFIX = "infer_"  # ids per lookup when reading the whole table back


def check_sync_mode(cfg: RootConfig) -> None:
    """sync (a_sync=False) segfaults in SendBarrierOp in paddlepaddle 3.0.0: refuse it."""
    if str(cfg.mode.name) != "ps" or cfg.mode.sync_mode != "sync":
        return
    try:
        paddle_version = version("paddlepaddle")
    except PackageNotFoundError:
        paddle_version = "unknown"
    if paddle_version.startswith("3.0."):
        raise DistError(f"mode.sync_mode=sync crashes paddlepaddle {paddle_version}'s parameter "
                        "server (segfault in SendBarrierOp); use mode.sync_mode=async or geo")


class FleetEmbedding:
    """Stands in for the Net's nn.Embedding: a lookup in the servers' table."""

    def __init__(self, num: int, dim: int, scale: float, geo: bool) -> None:
        self.num, self.dim, self.scale, self.geo = num, dim, scale, geo
        self.output: Any = None

    def __call__(self, ids: Any) -> Any:
        import paddle

        attr = paddle.ParamAttr(name=TABLE, initializer=paddle.nn.initializer.Uniform(
            -self.scale, self.scale))
        if self.geo:  # geo keeps a local copy of the table; sparse_embedding does not train
            rows = paddle.static.nn.embedding(ids, size=[self.num, self.dim], is_sparse=True,
                                              param_attr=attr)
        else:
            rows = paddle.static.nn.sparse_embedding(ids, size=[self.num, self.dim],
                                                     param_attr=attr)
        self.output = rows
        return paddle.reshape(rows, [-1, NUM_SPARSE, self.dim])


@dataclasses.dataclass
class Graph:
    main: Any
    startup: Any
    net: Any  # the static-mode Net (dense parameters)
    embedding: FleetEmbedding
    label: Any
    dense: Any
    ids: Any
    loss: Any
    prob: Any


def build_graph(cfg: RootConfig) -> Graph:
    import paddle
    import paddle.nn.functional as F

    main, startup = paddle.static.Program(), paddle.static.Program()
    main.random_seed = startup.random_seed = cfg.runner.seed
    with paddle.static.program_guard(main, startup):
        label = paddle.static.data("label", [-1, 1], "float32")
        dense = paddle.static.data("dense", [-1, NUM_DENSE], "float32")
        ids = paddle.static.data("sparse_ids", [-1, 1], "int64", lod_level=1)
        # A 1-row table in the Net's own embedding: it is replaced before use.
        net = build_net(dataclasses.replace(cfg, model=dataclasses.replace(
            cfg.model, sparse_feature_number=1)))
        weight = net.embedding.weight
        emb = FleetEmbedding(cfg.model.sparse_feature_number, weight.shape[1],
                             cfg.model.init_scale, cfg.mode.sync_mode == "geo")
        del net._sub_layers["embedding"]
        object.__setattr__(net, "embedding", emb)
        logits = net(dense, ids)
        loss = F.binary_cross_entropy_with_logits(logits, label)
        prob = F.sigmoid(logits)
    return Graph(main, startup, net, emb, label, dense, ids, loss, prob)


class PsJob:
    """One trainer of the job (the server side is a few lines in run_ps)."""

    def __init__(self, cfg: RootConfig, role: Role, graph: Graph, exe: Any) -> None:
        import paddle
        from paddle.distributed import fleet

        self.paddle, self.fleet = paddle, fleet
        self.cfg, self.role, self.g, self.exe = cfg, role, graph, exe
        self.out = Path(cfg.runner.output_dir)
        self.rank, self.world = role.index, role.trainers_num
        self.is_writer = self.rank == 0
        self.infer_exe = paddle.static.Executor(paddle.CPUPlace())
        self.program = graph.loss.block.program  # the fleet-rewritten program
        # Forward only: a for_test clone still holds the fused push ops, so prune to the
        # outputs (the pull of the rows stays; nothing is pushed back).
        self.test_program = self.program.clone(for_test=True)._prune_with_input(
            ["dense", "sparse_ids"], [graph.prob, graph.embedding.output])
        # Own input names too: train_from_dataset's data feed leaves the scope's `dense` and
        # `sparse_ids` in a state exe.run's feed cannot use (3.0.0 fails or segfaults).
        for name in ("dense", "sparse_ids"):
            self.test_program.global_block()._rename_var(name, INFER_PREFIX + name)
        self.pre = preprocessor_for(cfg)
        self.errors = RowErrors(str(cfg.dataset.on_error), cfg.dataset.max_logged_errors)
        self.exchange = self.out / "dist" / "exchange"
        self.progress = Progress()

    # --- trainers' collective operations, through gloo barriers and the run directory ----
    def barrier(self) -> None:
        self.fleet.util.barrier()

    def gather(self, name: str, arrays: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        """Every trainer's arrays, rank order (files in the shared run directory)."""
        self.exchange.mkdir(parents=True, exist_ok=True)
        tmp = self.exchange / f".{name}.{self.rank}.npz"
        np.savez(tmp, **arrays)
        tmp.replace(self.exchange / f"{name}.{self.rank}.npz")
        self.barrier()
        parts = []
        for r in range(self.world):
            with np.load(self.exchange / f"{name}.{r}.npz") as z:
                parts.append({k: z[k] for k in z.files})
        self.barrier()  # everyone has read: the next gather may overwrite
        return parts

    def pull_dense(self) -> None:
        """Refresh this trainer's dense parameters from the servers.

        Trainers keep a local copy that train_from_dataset refreshes only now and then; the
        public API has no pull, so this uses the runtime handle (as fleet's own save does).
        """
        if self.cfg.mode.sync_mode == "geo":
            return  # geo trainers own their copies; the communicator merges them
        from paddle.distributed.ps.utils.public import get_the_one_recv_context

        rt = self.fleet.fleet._runtime_handle
        recv = get_the_one_recv_context(rt.context, split_dense_table=rt.is_heter_ps_mode)
        rt._pull_all_dense(rt.scopes, rt._send_ctx, recv)

    # --- data --------------------------------------------------------------------------
    def convert(self) -> tuple[list[str], int]:
        from recrunner.fleet.slots import convert_shard

        shard_dir = self.out / "dist" / "slots" / f"train-{self.rank}-of-{self.world}"
        start = time.perf_counter()
        files, rows = convert_shard(self.cfg.dataset, self.cfg.dataset.train, self.pre,
                                    self.errors, Shard(self.rank, self.world), shard_dir)
        log.info("MultiSlot shard: %d rows in %d files (%.1fs)", rows, len(files),
                 time.perf_counter() - start)
        return files, rows

    def lod_ids(self, sparse: np.ndarray) -> Any:
        flat = np.ascontiguousarray(sparse.reshape(-1, 1), np.int64)
        return self.paddle.base.create_lod_tensor(flat, [[NUM_SPARSE] * len(sparse)],
                                                  self.paddle.CPUPlace())

    # --- training ----------------------------------------------------------------------
    def train_epoch(self, files: list[str], rows: int) -> None:
        ds = self.paddle.distributed.QueueDataset()
        ds.init(use_var=[self.g.label, self.g.dense, self.g.ids], pipe_command="cat",
                batch_size=self.cfg.runner.batch_size, thread_num=1)
        ds.set_filelist(files)
        start = time.perf_counter()
        if rows:
            self.exe.train_from_dataset(program=self.program, dataset=ds,
                                        fetch_list=[self.g.loss], fetch_info=["loss"],
                                        print_period=max(1, self.cfg.runner.log_every_steps))
        seconds = time.perf_counter() - start
        self.barrier()  # every push of the epoch has been sent
        parts = self.gather("epoch", {"rows": np.array([rows]), "sec": np.array([seconds])})
        progress = self.progress
        progress.train_examples += int(sum(int(p["rows"][0]) for p in parts))
        # The job's wall time: the slowest trainer's.
        progress.train_seconds += max(float(p["sec"][0]) for p in parts)
        progress.step += math.ceil(rows / self.cfg.runner.batch_size)
        progress.epoch += 1

    def infer(self, fetch: Any, dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        """One forward pass of the pruned program (rows pulled from the servers)."""
        # Own feed/fetch holders: after train_from_dataset the default `feed` variable no
        # longer holds what exe.run expects (3.0.0 fails or segfaults in FeedOp).
        (out,) = self.infer_exe.run(self.test_program, fetch_list=[fetch],
                                    feed={INFER_PREFIX + "dense": dense,
                                          INFER_PREFIX + "sparse_ids": self.lod_ids(sparse)},
                                    feed_var_name="recrun_feed",
                                    return_numpy=False)  # embedding rows carry the ids' LoD
        return np.array(out)

    def predict_shard(self) -> tuple[np.ndarray, np.ndarray]:
        labels, probs = [], []
        blocks = iter_examples(self.cfg.dataset, self.cfg.dataset.test, self.pre, self.errors,
                               Shard(self.rank, self.world))
        for batch in rebatch(blocks, self.cfg.runner.eval_batch_size):
            probs.append(self.infer(self.g.prob, batch.dense, batch.sparse).reshape(-1))
            labels.append(batch.label)
        if not probs:
            return np.empty(0, np.float32), np.empty(0, np.float32)
        return np.concatenate(labels), np.concatenate(probs)

    def evaluate(self) -> dict[str, Any]:
        # A fresh executor after each train_from_dataset: it drops the scope's children,
        # where a cached executor keeps its feed variables (3.0.0 then segfaults in FeedOp).
        self.infer_exe = self.paddle.static.Executor(self.paddle.CPUPlace())
        self.pull_dense()
        start = time.perf_counter()
        labels, probs = self.predict_shard()
        seconds = time.perf_counter() - start
        parts = self.gather("eval", {"label": labels, "prob": probs})
        all_labels = unshard([p["label"] for p in parts], self.cfg.dataset.test)
        all_probs = unshard([p["prob"] for p in parts], self.cfg.dataset.test)
        metrics = evaluate_test_set(self.cfg.dataset.test, all_labels, all_probs)
        metrics["eval_examples_per_sec"] = len(all_labels) / max(seconds, 1e-9)
        if self.is_writer:
            np.savez(self.out / "dist" / "eval_predictions.npz", label=all_labels,
                     prob=all_probs, rank_probs=np.array([len(p["prob"]) for p in parts]))
        return metrics

    def record(self, metrics: dict[str, Any]) -> None:
        if self.is_writer:
            self.progress.record(self.out, metrics)
        log.info("epoch %d: auc=%.5f logloss=%.5f", self.progress.epoch, metrics["auc"],
                 metrics["logloss"])

    # --- the model as a dygraph Net ----------------------------------------------------
    def table_rows(self) -> np.ndarray:
        """The whole embedding table as the trainers see it (pulled from the servers)."""
        n = self.cfg.model.sparse_feature_number
        rows = []
        per_batch = IDS_CHUNK // NUM_SPARSE
        zeros = np.zeros((per_batch, NUM_DENSE), np.float32)
        for start in range(0, n, per_batch * NUM_SPARSE):
            ids = np.arange(start, min(start + per_batch * NUM_SPARSE, n), dtype=np.int64)
            pad = (-len(ids)) % NUM_SPARSE
            padded = np.concatenate([ids, np.zeros(pad, np.int64)]).reshape(-1, NUM_SPARSE)
            b = len(padded)
            out = self.infer(self.g.embedding.output, zeros[:b], padded)
            rows.append(out[: len(ids)])
        return np.concatenate(rows)

    def dense_state(self) -> dict[str, np.ndarray]:
        scope = self.paddle.static.global_scope()
        return {key: np.array(scope.find_var(p.name).get_tensor())
                for key, p in self.g.net.state_dict().items()}

    def net_state(self) -> dict[str, np.ndarray]:
        """The dygraph Net's state_dict (numpy) holding the servers' values."""
        return {**self.dense_state(), "embedding.weight": self.table_rows()}

    def save_checkpoint(self) -> None:
        """Numbered checkpoint: the Net (for eval/export, as mode=local) and the servers'
        tables with their optimizer states (for resume), beside it as <epoch>.ps/."""
        root = checkpoint.checkpoint_root(self.out)
        ps_dir = root / f"{self.progress.epoch}.ps"
        if self.is_writer:
            root.mkdir(parents=True, exist_ok=True)
        self.barrier()
        self.fleet.save_persistables(self.exe, str(ps_dir))  # barriers inside
        if self.is_writer:
            # numpy arrays: paddle.load gives them back and Net.set_state_dict takes them.
            path = checkpoint.save(self.out, self.progress.epoch, self.net_state(), {}, {
                **self.progress.checkpoint_state(),
                "fingerprint": model_fingerprint(self.cfg), "ps_tables": ps_dir.name,
                "mode": "ps"})
            log.info("checkpoint %s", path)
        self.barrier()

    def restore(self) -> None:
        ckpt = checkpoint.to_resume(self.out, self.cfg.runner.resume,
                                    model_fingerprint(self.cfg))
        if ckpt is None:
            return
        # geo: run_ps has loaded the checkpoint into every copy (fleet.geo.load_geo_copies).
        if self.cfg.mode.sync_mode != "geo":
            ps_dir = ckpt.path.parent / ckpt.state.get("ps_tables", f"{ckpt.epoch}.ps")
            if not ps_dir.is_dir():
                raise DistError(f"checkpoint {ckpt.path} has no parameter-server tables "
                                f"({ps_dir}); it was not written by mode=ps")
            self.fleet.load_model(str(ps_dir), mode=0)  # tables + optimizer states
            self.pull_dense()
        self.progress.resume(ckpt)
        log.info("resumed from %s (epoch %d)", ckpt.path, ckpt.epoch)

    def finish(self, metrics: dict[str, Any]) -> dict[str, Any]:
        export_dir = self.out / "export"
        summary = self.progress.summary(
            metrics, skipped_rows=self.errors.count, export_dir=str(export_dir), mode="ps",
            world_size=self.world, servers=len(self.role.servers),
            sync_mode=self.cfg.mode.sync_mode)
        if self.is_writer:
            from recrunner.config.compose import to_yaml
            from recrunner.fleet import rebuild

            dist = self.out / "dist"
            self.paddle.save(self.net_state(), str(dist / rebuild.STATE))
            (dist / rebuild.CONFIG).write_text(to_yaml(self.cfg))
            (dist / rebuild.EXTRA).write_text(json.dumps({"metrics": metrics,
                                                          "trained_by": "mode=ps"}))
            rebuild.rebuild_in_subprocess(self.out, self.cfg.mode.timeout_s)
            (self.out / "summary.json").write_text(json.dumps(summary, indent=2))
        self.barrier()
        return summary

    def run(self) -> dict[str, Any]:
        cfg = self.cfg.runner
        self.restore()
        files, rows = self.convert()
        metrics: dict[str, Any] | None = None
        while self.progress.epoch < cfg.epochs:
            self.train_epoch(files, rows)
            metrics = self.evaluate()
            self.record(metrics)
            self.save_checkpoint()
        if metrics is None:
            metrics = self.evaluate()
        return self.finish(metrics)


def run_ps(cfg: RootConfig, role: Role) -> dict[str, Any] | None:
    check_sync_mode(cfg)
    from recrunner.fleet.worker import StartupWatchdog, fail_status
    from recrunner.runtime import import_paddle

    paddle = import_paddle(cfg.runner.threads, static=True)
    paddle.enable_static()
    from paddle.distributed import fleet

    timeout = cfg.mode.timeout_s
    if role.is_server:
        check_port_free(role.servers[role.index], f"parameter server {role.index}")
    else:
        gloo = os.environ.get("PADDLE_GLOO_HTTP_ENDPOINT")
        if gloo and int(os.environ.get("PADDLE_WITH_GLOO", "0")):
            # Server 0 hosts the gloo rendezvous: no server, no job.
            wait_for_port(gloo, timeout, "parameter server 0's gloo rendezvous")
    watchdog = StartupWatchdog(timeout, f"{role.name}: forming the PS job (servers "
                               f"{','.join(role.servers)})", fail_status(cfg, role))
    fleet.init(fleet.PaddleCloudRoleMaker(is_collective=False))
    graph = build_graph(cfg)
    strategy = fleet.DistributedStrategy()
    configure_strategy(strategy, cfg, TABLE)
    with paddle.static.program_guard(graph.main, graph.startup):
        opt = fleet.distributed_optimizer(trainer_optimizer(paddle, cfg), strategy)
        opt.minimize(graph.loss)
    if role.is_server:
        fleet.init_server()
        watchdog.done.set()
        log.info("parameter server %d serving on %s", role.index, role.servers[role.index])
        fleet.run_server()  # until a trainer stops it
        return None

    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(graph.startup)
    if cfg.mode.sync_mode == "geo":  # before init_worker shares this trainer's copies
        load_geo_copies(cfg, graph.net, TABLE)
    for ep in role.servers:  # 3.0.0's own wait_server_ready does nothing
        wait_for_port(ep, timeout, "parameter server")
    fleet.init_worker()
    watchdog.done.set()
    job = PsJob(cfg, role, graph, exe)
    if role.index == 0:
        from recrunner.data.prepare import ensure_dataset

        ensure_dataset(cfg.dataset)  # a no-op when the launcher already did it
    job.barrier()
    summary = job.run()
    # Only on success: after a failure the peers may never reach the barriers; the launcher
    # (or the operator) stops the job instead.
    stop_job(fleet, role)
    return summary


def stop_job(fleet: Any, role: Role) -> None:
    """Leave together; the first trainer then stops the servers (no public API for it)."""
    fleet.util.barrier()
    fleet.stop_worker()
    fleet.util.barrier()
    if role.index == 0:
        fleet.fleet._runtime_handle._worker.stop_server()
