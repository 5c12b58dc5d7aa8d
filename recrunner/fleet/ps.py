"""mode=ps: a parameter-server job (static graph, fleet `the_one_ps`).

Servers hold the embedding table and the dense parameters (with their Adam states); trainers
read their shard of pre-converted MultiSlot files through Paddle's C++ data feed
(`exe.train_from_dataset`), pull what a batch needs and push gradients (async, or geo).
The network is the model zoo's own Net, built in static mode over the fleet's distributed
lookup as its id table (FleetTable), and trained by the same run driver as mode=local
(PsEngine, PsTrainerGroup); the export is that Net in dygraph filled with the servers' values
and saved by recrunner.export.save_export: identical to a local export.
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

from recrunner import atomic, faults
from recrunner.config.schema import RootConfig
from recrunner.data.batch import Batch
from recrunner.data.reader import unshard
from recrunner.fleet import ps_saved, status
from recrunner.fleet.geo import TABLE_KEY, load_geo_copies
from recrunner.fleet.ps_tables import (
    SAVE_ALL,
    SAVE_DELTA,
    SAVE_PASS,
    TABLE_ID,
    configure_strategy,
    table_shards,
    trainer_optimizer,
)
from recrunner.fleet.rendezvous import poll_rendezvous_quickly
from recrunner.fleet.roles import DistError, Role, check_port_free, wait_for_port
from recrunner.fleet.static_math import cheap_caller_lookup
from recrunner.train import checkpoint
from recrunner.train.build import build_net, model_inputs, table_rows, table_width
from recrunner.train.checkpoint import MODEL_FILE, Checkpoint
from recrunner.train.driver import RunDriver
from recrunner.train.engine import EpochStats, ModelState, OnStep
from recrunner.train.group import LocalGroup
from recrunner.train.reading import Reader

log = logging.getLogger("recrunner.fleet")
TABLE = "sparse_embedding_table"
IDS_CHUNK = 100_000  # ids per lookup when reading rows back (a geo copy, a restore's sample)
INFER_PREFIX = "infer_"
# A restored parameter against the checkpoint's, relative: the servers' table files are text
# with 6 significant digits (measured: up to 5.0e-6).
RESTORE_RTOL = 1e-5
SAMPLE_ROWS = 64  # rows a saved file, checked after a restore


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


def oversubscribed(cfg: RootConfig, cores: int) -> str | None:
    """A one-line warning when a local geo PS job has more trainers than cores, else None.

    Geo then trails the local model far more than when its processes do not contend (200k
    rows, local 0.826: geo with 4 trainers on 2 cores 0.59-0.81 between identical runs, 0.818
    with each trainer's input paced to a sixth of the machine; docs/distributed.md, "Without
    contention"). Async is not warned of: paced or not, 4 async trainers there were 0.01 short.
    Not an error: a small job on a laptop is still a useful smoke test of the fleet path."""
    if (str(cfg.mode.name) != "ps" or cfg.mode.sync_mode != "geo"
            or cfg.mode.trainers <= cores):
        return None
    return (f"mode.trainers={cfg.mode.trainers} on {cores} core(s): geo trainers that share "
            "cores trail the local model far more than usual (4 trainers on 2 cores: 0.02-0.24 "
            "AUC behind, 0.008 when they do not contend; docs/distributed.md); use at most "
            f"{cores} trainer(s) here")


class FleetTable:
    """The model's id table in mode=ps: a lookup in the servers' table (ids [B, S] -> rows
    [B, S, width]), handed to the Net in place of the dygraph embedding."""

    def __init__(self, rows: int, width: int, scale: float, geo: bool, columns: int) -> None:
        self.rows, self.width, self.scale, self.geo = rows, width, scale, geo
        self.columns = columns  # ids per row
        self.output: Any = None

    def __call__(self, ids: Any) -> Any:
        import paddle

        attr = paddle.ParamAttr(name=TABLE, initializer=paddle.nn.initializer.Uniform(
            -self.scale, self.scale))
        if self.geo:  # geo keeps a local copy of the table; sparse_embedding does not train
            rows = paddle.static.nn.embedding(ids, size=[self.rows, self.width],
                                              is_sparse=True, param_attr=attr)
        else:
            rows = paddle.static.nn.sparse_embedding(ids, size=[self.rows, self.width],
                                                     param_attr=attr)
        self.output = rows
        return paddle.reshape(rows, [-1, self.columns, self.width])


@dataclasses.dataclass
class Graph:
    main: Any
    startup: Any
    net: Any  # the static-mode Net (dense parameters)
    table: FleetTable
    label: Any
    dense: Any
    ids: Any
    loss: Any
    prob: Any


def build_graph(cfg: RootConfig) -> Graph:
    import paddle
    import paddle.nn.functional as F

    inputs = model_inputs(cfg)
    main, startup = paddle.static.Program(), paddle.static.Program()
    # Paddle's stubs declare random_seed read-only; the Program has a setter at runtime.
    main.random_seed = startup.random_seed = cfg.runner.seed  # type: ignore[misc]
    with paddle.static.program_guard(main, startup):
        label = paddle.static.data("label", [-1, 1], "float32")
        # No dense features: no dense input (the models ignore `dense` then).
        dense = paddle.static.data("dense", [-1, inputs.num_dense], "float32") \
            if inputs.num_dense else None
        # MultiSlot feeds ids as one LoD sequence per row.
        ids = paddle.static.data("sparse_ids", [-1, 1], "int64", lod_level=1)
        table = FleetTable(table_rows(cfg), table_width(cfg), cfg.model.init_scale,
                           cfg.mode.sync_mode == "geo", inputs.sparse_width)
        net = build_net(cfg, table)
        logits = net(dense, ids)
        loss = F.binary_cross_entropy_with_logits(logits, label)
        prob = F.sigmoid(logits)
    return Graph(main, startup, net, table, label, dense, ids, loss, prob)


class PsTrainerGroup(LocalGroup):
    """The trainers of a PS job: gloo barriers, and arrays exchanged through files in the
    shared run directory (fleet's gloo helpers carry small Python values only)."""

    host_tables = False  # the servers apply the gradients

    def __init__(self, role: Role, exchange: Path) -> None:
        from paddle.distributed import fleet

        self.fleet = fleet
        self.rank, self.world = role.index, role.trainers_num
        self.exchange = exchange
        self._round = 0

    def barrier(self) -> None:
        self.fleet.util.barrier()

    def _all(self, values: np.ndarray) -> list[np.ndarray]:
        """Every trainer's array, rank order."""
        self._round += 1
        self.exchange.mkdir(parents=True, exist_ok=True)
        with atomic.writing(self.exchange / f"{self._round}.{self.rank}.npy", "exchange") \
                as tmp, open(tmp, "wb") as fh:
            np.save(fh, values)
        self.barrier()
        parts = [np.load(self.exchange / f"{self._round}.{r}.npy") for r in range(self.world)]
        self.barrier()  # everyone has read: the files may go
        (self.exchange / f"{self._round}.{self.rank}.npy").unlink()
        return parts

    def gather(self, values: np.ndarray) -> np.ndarray:
        return np.concatenate(self._all(values))

    def gather_rows(self, values: np.ndarray, spec: str) -> np.ndarray:
        return unshard(self._all(values), spec)

    def sum(self, value: float) -> float:
        return float(sum(p[0] for p in self._all(np.array([value], np.float64))))

    def max(self, value: float) -> float:
        return float(max(p[0] for p in self._all(np.array([value], np.float64))))


class PsEngine:
    """One trainer's side of the static-graph parameter-server job."""

    steps_visible = False  # the C++ data feed trains a whole epoch per call

    def __init__(self, cfg: RootConfig, role: Role, graph: Graph, exe: Any,
                 group: LocalGroup, reader: Reader, table_shards: int) -> None:
        import paddle
        from paddle.distributed import fleet

        self.paddle, self.fleet = paddle, fleet
        self.cfg, self.role, self.g, self.exe = cfg, role, graph, exe
        self.group, self.reader = group, reader
        self.out = Path(cfg.runner.output_dir)
        self.inputs = model_inputs(cfg)
        self.infer_exe = paddle.static.Executor(paddle.CPUPlace())
        self.program = graph.loss.block.program  # the fleet-rewritten program
        # Forward only: a for_test clone still holds the fused push ops, so prune to the
        # outputs (the pull of the rows stays; nothing is pushed back).
        self.feed_names = ["dense", "sparse_ids"] if graph.dense is not None else ["sparse_ids"]
        self.test_program = self.program.clone(for_test=True)._prune_with_input(
            self.feed_names, [graph.prob, graph.table.output])
        # Own input names too: train_from_dataset's data feed leaves the scope's `dense` and
        # `sparse_ids` in a state exe.run's feed cannot use (3.0.0 fails or segfaults).
        for name in self.feed_names:
            self.test_program.global_block()._rename_var(name, INFER_PREFIX + name)
        self.slot_files: dict[str, tuple[list[str], int]] = {}  # by dataset.train
        # Geo trainers' copies can only start from a checkpoint (before init_worker), not reload
        # one later: a geo job exports its last epoch.
        self.can_restore = cfg.mode.sync_mode != "geo"
        # Geo trainers train their own copies, merged every mode.geo_k_steps: the writer's is
        # the model that is checkpointed and exported, so it is the one evaluated.
        self.copies_differ = cfg.mode.sync_mode == "geo"
        self.resumed_geo = False  # run_ps loaded the checkpoint to resume into the copies
        self.table_shards = table_shards  # the servers' (resume_table_shards)
        self.save_mode = SAVE_PASS if cfg.runner.online else SAVE_ALL

    def flush(self) -> None:
        """Wait until this client's queued pushes have reached the servers."""
        rt: Any = self.fleet.fleet._runtime_handle  # typed None in Paddle; set by init_worker
        rt._worker.client_flush()

    def pull_dense(self) -> None:
        """Refresh this trainer's dense parameters from the servers.

        Trainers keep a local copy that train_from_dataset refreshes only now and then; the
        public API has no pull, so this uses the runtime handle (as fleet's own save does).
        """
        if self.cfg.mode.sync_mode == "geo":
            return  # geo trainers own their copies; the communicator merges them
        from paddle.distributed.ps.utils.public import get_the_one_recv_context

        # Typed None in Paddle (its initial value); fleet.init_worker has set the runtime.
        rt: Any = self.fleet.fleet._runtime_handle
        recv = get_the_one_recv_context(rt.context, split_dense_table=rt.is_heter_ps_mode)
        rt._pull_all_dense(rt.scopes, rt._send_ctx, recv)

    # --- training ----------------------------------------------------------------------
    def convert(self) -> tuple[list[str], int]:
        """This trainer's shard of dataset.train as MultiSlot files (once per run and data,
        cached across runs; an online run's passes each have their own partition)."""
        spec = str(self.cfg.dataset.train)
        if spec not in self.slot_files:
            from recrunner.fleet.slots import convert_shard, trainer_shard_dir

            shard_dir = trainer_shard_dir(self.out, self.group.rank, self.group.world)
            if self.cfg.runner.online:
                shard_dir = shard_dir / stable_name(spec)
            start = time.perf_counter()
            files, rows = convert_shard(self.cfg.dataset, spec, self.reader.schema,
                                        self.reader.errors, self.reader.shard, shard_dir)
            log.info("MultiSlot shard: %d rows in %d files (%.1fs)", rows, len(files),
                     time.perf_counter() - start)
            self.slot_files[spec] = files, rows
        return self.slot_files[spec]

    def train_files(self, files: list[str], pipe_command: str = "cat") -> None:
        """Train on MultiSlot `files` through Paddle's data feed, each read through
        `pipe_command` (an elastic job's task: a byte range of one file)."""
        ds = self.paddle.distributed.QueueDataset()
        slots = [v for v in (self.g.label, self.g.dense, self.g.ids) if v is not None]
        ds.init(use_var=slots, pipe_command=pipe_command,
                batch_size=self.cfg.runner.batch_size, thread_num=1)
        ds.set_filelist(files)
        self.exe.train_from_dataset(program=self.program, dataset=ds,
                                    fetch_list=[self.g.loss], fetch_info=["loss"],
                                    print_period=max(1, self.cfg.runner.log_every_steps))

    def train_epoch(self, epoch: int, on_step: OnStep) -> EpochStats:
        files, rows = self.convert()
        start, began = time.perf_counter(), time.time()
        if rows:
            self.train_files(files)
        seconds = time.perf_counter() - start
        # Wall-clock times: how the trainers' windows line up (benchmarks/bench_geo_swing.py).
        log.info("epoch %d: trained %d rows in %.1fs (wall clock %.2f-%.2f)", epoch, rows,
                 seconds, began, time.time())
        self.group.barrier()  # every push of the epoch has been sent
        return EpochStats(examples=rows, steps=math.ceil(rows / self.cfg.runner.batch_size),
                          seconds=seconds)

    # --- prediction --------------------------------------------------------------------
    def lod_ids(self, sparse: np.ndarray) -> Any:
        flat = np.ascontiguousarray(sparse.reshape(-1, 1), np.int64)
        return self.paddle.base.create_lod_tensor(flat, [[sparse.shape[1]] * len(sparse)],
                                                  self.paddle.CPUPlace())

    def infer(self, fetch: Any, dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
        """One forward pass of the pruned program (rows pulled from the servers)."""
        # Own feed/fetch holders: after train_from_dataset the default `feed` variable no
        # longer holds what exe.run expects (3.0.0 fails or segfaults in FeedOp).
        feed = {INFER_PREFIX + "sparse_ids": self.lod_ids(sparse)}
        if "dense" in self.feed_names:
            feed[INFER_PREFIX + "dense"] = dense
        (out,) = self.infer_exe.run(self.test_program, fetch_list=[fetch], feed=feed,
                                    feed_var_name="recrun_feed",
                                    return_numpy=False)  # embedding rows carry the ids' LoD
        return np.array(out)

    def begin_eval(self) -> None:
        # A fresh executor after each train_from_dataset: it drops the scope's children,
        # where a cached executor keeps its feed variables (3.0.0 then segfaults in FeedOp).
        self.infer_exe = self.paddle.static.Executor(self.paddle.CPUPlace())
        self.pull_dense()
        if self.copies_differ:
            self.wait_for_geo_merges()

    def wait_for_geo_merges(self, poll_s: float = 0.3, timeout_s: float = 30.0) -> None:
        """Geo's communicator merges the last deltas into this trainer's copy in the
        background after training returns: wait until the copy holds still, so that the
        evaluation, the checkpoint and the export read the same model."""
        import zlib

        from paddle.utils.dlpack import to_dlpack

        class Capsule:  # numpy.from_dlpack takes an object that yields the capsule
            def __init__(self, tensor: Any) -> None:
                self.capsule = to_dlpack(tensor)

            def __dlpack__(self, **_: Any) -> Any:
                return self.capsule

            def __dlpack_device__(self) -> tuple[int, int]:
                return 1, 0  # kDLCPU

        scope = self.paddle.static.global_scope()
        # The table too: its last rows arrive in the same rounds as the dense deltas.
        names = [p.name for p in self.g.net.state_dict().values()] + [TABLE]

        def digest() -> int:
            # A CRC of views of the tensors' own memory: no copy of the 36 MB table per poll
            # (a copy, another, then SHA-256 took ≈ 60 ms a poll; this ≈ 11 ms). A torn read
            # while a merge writes only makes the digest differ: not still yet.
            crc = 0
            for name in names:
                view = np.from_dlpack(Capsule(scope.find_var(name).get_tensor()))
                crc = zlib.crc32(view.data, crc)
            return crc

        start = time.monotonic()
        last, still, polls = digest(), 0, 0
        while still < 2 and time.monotonic() < start + timeout_s:
            time.sleep(poll_s)
            now = digest()
            still = still + 1 if now == last else 0
            last, polls = now, polls + 1
        log.info("geo: the copy %s after %.1f s (%d polls)",
                 "held still" if still >= 2 else "still changing", time.monotonic() - start, polls)

    def predict(self, batch: Batch) -> np.ndarray:
        return self.infer(self.g.prob, batch.dense, batch.sparse).reshape(-1)

    def end_eval(self) -> None:
        pass

    # --- the model as a dygraph Net ----------------------------------------------------
    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of the id table as the trainers see them (pulled from the servers; geo:
        this trainer's copy)."""
        width = self.inputs.sparse_width
        per_batch = max(1, IDS_CHUNK // width)
        zeros = np.zeros((per_batch, self.inputs.num_dense), np.float32)
        rows = [np.empty((0, self.table_shape()[1]), np.float32)]
        for start in range(0, len(ids), per_batch * width):
            part = np.asarray(ids[start:start + per_batch * width], np.int64)
            pad = (-len(part)) % width
            padded = np.concatenate([part, np.zeros(pad, np.int64)]).reshape(-1, width)
            out = self.infer(self.g.table.output, zeros[:len(padded)], padded)
            rows.append(out.reshape(-1, out.shape[-1])[: len(part)])  # geo's lookup: [N, 1, w]
        return np.concatenate(rows)

    def table_shape(self) -> tuple[int, int]:
        return table_rows(self.cfg), table_width(self.cfg)

    def table_values(self) -> np.ndarray:
        """The whole id table as this trainer sees it (geo: its own copy)."""
        return self.lookup(np.arange(table_rows(self.cfg), dtype=np.int64))

    def dense_state(self) -> dict[str, np.ndarray]:
        scope = self.paddle.static.global_scope()
        return {key: np.array(scope.find_var(p.name).get_tensor())
                for key, p in self.g.net.state_dict().items()}

    def net_state(self) -> dict[str, np.ndarray]:
        """The dygraph Net's state_dict (numpy) holding the servers' values."""
        self.begin_eval()
        return {**self.dense_state(), TABLE_KEY: self.table_values()}

    def state(self, checkpoint_root: Path, epoch: int) -> ModelState:
        """The servers save their tables with their optimizer states (for resume) beside the
        checkpoint as <epoch>.ps/; the checkpoint holds the rest of the Net (save_state)."""
        return self.save_state(checkpoint_root, f"{epoch}.ps")

    def save_state(self, checkpoint_root: Path, name: str) -> ModelState:
        """state(), the servers' tables saved as <checkpoint_root>/<name>. The checkpoint's
        Net holds the dense parameters; the id table is the servers' files, which the export
        (recrunner.fleet.rebuild) and the versions (recrunner.online.tables) read a block at
        a time: no trainer reads the whole table back. Geo's holds the writer's copy of the
        table too (its trainers hold whole copies anyway, and resume from it:
        fleet.geo.load_geo_copies)."""
        ps_dir = checkpoint_root / name
        # Saved aside, then put in place whole by the writer (atomic.adopt_dir): a server or
        # trainer killed mid-save leaves no half table under a checkpoint's name.
        saving = checkpoint_root / f".{name}.saving"
        if self.group.is_writer:
            atomic.remove(saving)  # a killed job's
        self.group.barrier()
        faults.point("ps_tables.begin")
        # Online passes save with mode 3: every row, then every row's unseen-days count + 1,
        # which the servers' shrink evicts by (ps_tables.SAVE_PASS).
        self.fleet.save_persistables(self.exe, str(saving), mode=self.save_mode)  # barriers
        if self.group.is_writer:
            atomic.adopt_dir(saving, ps_dir, "ps_tables")
        # numpy arrays: paddle.load gives them back and Net.set_state_dict takes them. Rows no
        # batch has touched are not on the servers: they read back as zeros, saved or resumed.
        net: dict[str, np.ndarray] = {}
        if self.group.is_writer and self.copies_differ:
            net = self.net_state()
        elif self.group.is_writer:
            self.begin_eval()
            net = self.dense_state()
        return ModelState(net, {}, {"ps_tables": ps_dir.name, "mode": "ps"})

    def restore(self, ckpt: Checkpoint, state: ModelState) -> None:
        if self.cfg.mode.sync_mode == "geo":
            # run_ps loaded the checkpoint into every copy before init_worker
            # (fleet.geo.load_geo_copies); a running geo job cannot reload one.
            if not self.resumed_geo:
                raise DistError("mode.sync_mode=geo cannot reload a checkpoint into a running "
                                "job")
            self.resumed_geo = False
            # Every trainer its own copy (trainer 1's came through the servers at init_worker).
            table = self.paddle.static.global_scope().find_var(TABLE).get_tensor()
            check_restored(ckpt, state.net, self.dense_state() | {TABLE_KEY: np.array(table)})
            self.group.barrier()  # before anyone trains: its merges would move the copies
            return
        ps_dir = ps_tables_dir(ckpt)
        if not ps_dir.is_dir():
            raise DistError(f"checkpoint {ckpt.path} has no parameter-server tables "
                            f"({ps_dir}); it was not written by mode=ps")
        check_table_shards(ckpt, self.table_shards)
        self.fleet.load_model(str(ps_dir), mode=0)  # servers load tables + optimizer states
        if self.save_mode == SAVE_PASS:
            # The files hold the unseen-days counts from before their save's increment.
            self.save_scratch(SAVE_PASS)
        self.pull_dense()
        # One trainer reads the servers back; the others wait: their pushes would move them.
        if self.group.is_writer:
            self.check_servers_hold(ckpt, ps_dir, state.net)
        self.group.barrier()

    def check_servers_hold(self, ckpt: Checkpoint, ps_dir: Path, saved: dict[str, Any]) -> None:
        """Fail unless the servers hold what `ckpt` saved: the dense parameters of its
        model.pdparams, and a sample of the table's saved rows (SAMPLE_ROWS from the start of
        every saved file: a table that failed to load, or one shard of it, reads back as
        zeros or fresh values)."""
        self.begin_eval()
        dense = {k: v for k, v in saved.items() if k != TABLE_KEY}
        ids, rows = ps_saved.sample(ps_dir / f"{TABLE_ID:03d}", self.table_shape()[1],
                                    SAMPLE_ROWS)
        check_restored(ckpt, {**dense, TABLE_KEY: rows},
                       {**self.dense_state(), TABLE_KEY: self.lookup(ids)})

    # --- online passes (recrunner.online.tables) ---------------------------------------
    def save_scratch(self, mode: int) -> np.ndarray:
        """Save the id table with Paddle's save `mode` into a scratch folder (every trainer;
        the servers write); the writer reads back the ids saved. The folder is removed."""
        scratch = self.out / "dist" / "table-save"
        if self.group.is_writer:
            atomic.remove(scratch)
        self.group.barrier()
        self.fleet.save_one_table(TABLE_ID, str(scratch), mode)  # barriers inside
        rows = ps_saved.ids(scratch / f"{TABLE_ID:03d}") if self.group.is_writer else \
            np.empty(0, np.int64)
        self.group.barrier()
        if self.group.is_writer:
            atomic.remove(scratch)
        return rows

    def saved_delta_rows(self) -> np.ndarray:
        """The rows pushed since the last call: the servers' delta (save mode 1, which then
        resets each saved row's delta score)."""
        return self.save_scratch(SAVE_DELTA)

    def shrink(self) -> None:
        """The servers delete the rows unseen for more than delete_after_unseen_days."""
        self.fleet.shrink()  # barriers inside

    def export(self, export_dir: Path, extra: dict[str, Any], ckpt: Checkpoint) -> Path:
        """The export is the dygraph Net filled with the checkpoint's values (the servers'
        tables as read back when it was saved: not read again), written by save_export as a
        fresh process would (recrunner.fleet.rebuild: this process runs the legacy static
        graph)."""
        from recrunner.config.compose import to_yaml
        from recrunner.fleet import rebuild

        dist = self.out / "dist"
        atomic.write_text(dist / rebuild.CONFIG, to_yaml(self.cfg), "config")
        atomic.write_text(dist / rebuild.EXTRA, json.dumps(extra), "config")
        rebuild.rebuild_here(self.out, ckpt.path / MODEL_FILE, self.cfg)
        return export_dir


def stable_name(spec: str) -> str:
    """A folder name for a data spec (stable across processes and runs)."""
    import hashlib

    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def check_restored(ckpt: Checkpoint, saved: dict[str, Any],
                   now: dict[str, np.ndarray]) -> None:
    """Fail unless the model a trainer sees after a restore (`now`) is `ckpt`'s (`saved`: its
    model.pdparams, read back when it was saved): Paddle's load warns at most and leaves a
    table fresh."""
    worst, where = 0.0, ""
    for key, value in saved.items():
        want = np.asarray(value, np.float32).reshape(-1)
        got = np.asarray(now[key], np.float32).reshape(-1)
        diff = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-3), initial=0.0))
        if diff > worst:
            worst, where = diff, key
    if worst > RESTORE_RTOL:
        raise DistError(f"the model restored from {ckpt.path} is not the one it saved: "
                        f"{where} differs by {worst:.2g} (relative); its tables did not load")
    log.info("restored %s: the model equals the checkpoint's (largest relative difference "
             "%.1e)", ckpt.path, worst)


def ps_tables_dir(ckpt: Checkpoint) -> Path:
    """The servers' tables saved beside checkpoint `ckpt`."""
    return ckpt.path.parent / ckpt.state.get("ps_tables", f"{ckpt.epoch}.ps")


def saved_table_shards(ps_dir: Path) -> int:
    """How many shards the servers saved the id table in (<ps_dir>/000/part-<server>-<shard>)."""
    return len(list((ps_dir / "000").glob("part-*")))


def check_table_shards(ckpt: Checkpoint, servers_shards: int) -> None:
    """Refuse to load `ckpt`'s tables into servers set up with another shard count (Paddle's
    load only warns and leaves them fresh): resume_table_shards read a newer checkpoint's."""
    saved = saved_table_shards(ps_tables_dir(ckpt))
    if saved != servers_shards:
        raise DistError(f"checkpoint {ckpt.path} holds its table in {saved} shards and the "
                        f"servers were set up for {servers_shards} (from a newer checkpoint); "
                        "remove the newer checkpoints to resume this one")


def resume_table_shards(cfg: RootConfig) -> int:
    """The table's shard count: that of the checkpoint the job will load, its own when
    resuming one, else runner.init_from's (the servers can load a table only into as many
    shards as it was saved in; older runs used fleet's 1000)."""
    if cfg.mode.sync_mode == "geo":
        return table_shards(cfg)
    sources = [cfg.runner.output_dir] if cfg.runner.resume else []
    if cfg.runner.init_from:
        sources.append(cfg.runner.init_from)
    for source in sources:
        ckpt = checkpoint.latest(source)
        if ckpt is not None:
            saved = saved_table_shards(ps_tables_dir(ckpt))
            return saved or table_shards(cfg)
    return table_shards(cfg)


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
    poll_rendezvous_quickly()
    fleet.init(fleet.PaddleCloudRoleMaker(is_collective=False))
    with cheap_caller_lookup():
        graph = build_graph(cfg)
    strategy = fleet.DistributedStrategy()
    shards = resume_table_shards(cfg)
    configure_strategy(strategy, cfg, TABLE, shards)
    with paddle.static.program_guard(graph.main, graph.startup):
        opt = fleet.distributed_optimizer(trainer_optimizer(paddle, cfg), strategy)
        opt.minimize(graph.loss)
        # fleet rewrites a copy of the startup program and makes it the default: there the
        # servers' table is a fake_init (no memory) and its optimizer state is gone. The
        # original would give every async trainer the whole table and two Adam moments (a
        # 29M-row table: 5 GB per trainer).
        startup = paddle.static.default_startup_program()
    if role.is_server:
        fleet.init_server()
        watchdog.done.set()
        log.info("parameter server %d serving on %s", role.index, role.servers[role.index])
        fleet.run_server()  # until a trainer stops it
        return None

    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    # geo: before init_worker shares this trainer's copies
    resumed_geo = cfg.mode.sync_mode == "geo" and \
        load_geo_copies(cfg, graph.net, TABLE) is not None
    for ep in role.servers:  # 3.0.0's own wait_server_ready does nothing
        wait_for_port(ep, timeout, "parameter server")
    if cfg.mode.elastic.ps:
        from recrunner.elasticps.run import run_elastic_client

        return run_elastic_client(cfg, role, graph, exe, shards, watchdog)
    # The trainers reach the servers together, each done with its own start-up: a resumed geo
    # job whose trainers arrived apart hung once in init_worker (trainer 0 pushing its copy of
    # the table, trainer 1 in the servers' barrier; docs/distributed.md, start-up cost).
    fleet.util.barrier()
    fleet.init_worker()
    watchdog.done.set()
    status.write(cfg.runner.output_dir, "trainer", role.index, status.RUNNING,
                 startup=status.FORMED)
    group = PsTrainerGroup(role, Path(cfg.runner.output_dir) / "dist" / "exchange")
    reader = Reader(cfg, group.shard)
    engine = PsEngine(cfg, role, graph, exe, group, reader, shards)
    engine.resumed_geo = resumed_geo
    if role.index == 0:
        from recrunner.data.prepare import ensure_dataset

        ensure_dataset(cfg.dataset, cfg.runner.online)  # a no-op after the launcher's
    group.barrier()
    driver: type[RunDriver] = RunDriver
    if cfg.runner.online:
        from recrunner.online.passes import OnlineDriver

        driver = OnlineDriver
    summary = driver(cfg, engine, group, reader, servers=len(role.servers),
                     sync_mode=cfg.mode.sync_mode).run()
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
