"""The tables' host-side lazy Adam (mode=local and mode=collective) is Paddle's lazy Adam, bit
for bit, and its state is Paddle's: a checkpoint moves between the two (a model whose tables
Paddle's optimizer updates: a plugin's plain sparse nn.Embedding)."""

from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from recrunner.config.compose import load
from recrunner.data.batch import Batch
from recrunner.data.reader import Shard
from recrunner.data.synth import generate
from recrunner.runtime import import_paddle
from recrunner.train.checkpoint import Checkpoint
from recrunner.train.dygraph import DygraphEngine
from recrunner.train.group import LocalGroup
from recrunner.train.reading import Reader
from recrunner.train.row_adam import RowAdam
from recrunner.zoo.rank.blocks import IdTable

paddle = import_paddle()

# A second table with its own rate (ParamAttr learning_rate), and L2 on the rows looked up.
CROSSES = ["model.wide_crosses=[[C1,C2]]", "model.wide_cross_lr_scale=5.0",
           "model.embedding_l2=0.001"]


class PaddleOptimizerGroup(LocalGroup):
    """One process, but the tables left to Paddle's optimizer (as mode=collective did before
    its ranks merged their rows for the host update)."""

    host_tables = False


def engine_and_batches(tmp_path: Path, steps: int, *overrides: str) -> tuple:
    train = tmp_path / "train.tsv"
    cfg = load([f"runner.output_dir={tmp_path}/run", "runner.progress=false",
                f"dataset.train={train}", "model.sparse_feature_number=20011", *overrides])
    generate(train, steps * cfg.runner.batch_size, cfg.runner.seed, 0)
    reader = Reader(cfg, Shard())
    batches = list(islice(reader.batches(str(train), cfg.runner.batch_size), steps))

    def engine(group: LocalGroup) -> DygraphEngine:
        # The parameters' names as a new process gives them (the optimizers' states key by them).
        with paddle.utils.unique_name.guard():
            return DygraphEngine(cfg, group, reader)

    return engine, batches


def step(engine: DygraphEngine, batch: Batch) -> float:
    # Paddle names the optimizer's accumulators at its first step, with a counter of the
    # process: as in a fresh process, so that two engines' states have the same keys.
    with paddle.utils.unique_name.guard():
        return engine.train_step(batch)


def assert_same_model(a: DygraphEngine, b: DygraphEngine) -> None:
    for name, state in (("net", lambda e: e.net.state_dict()),
                        ("tables' optimizer", lambda e: e.opt.parts["tables"].state_dict())):
        sa, sb = state(a), state(b)
        assert sa.keys() == sb.keys(), name
        for key, value in sa.items():
            np.testing.assert_array_equal(value.numpy(), sb[key].numpy(), err_msg=key)


# The host update runs in C when the fused kernels are built (recrunner/kernels/ops.cc), in
# numpy otherwise (runner.fused_kernels=false): both are checked against Paddle's.
@pytest.mark.parametrize("overrides", [[], CROSSES, ["runner.fused_kernels=false", *CROSSES]],
                         ids=["default", "crosses-lr-scale-l2", "numpy-crosses-lr-scale-l2"])
def test_host_update_is_paddles_lazy_adam(tmp_path: Path, overrides: list[str]) -> None:
    # Bit for bit. The two ways a first version differed, each caught here: it corrected by
    # beta^t (Paddle's sparse kernel uses beta^(t+1): 2.6e-4 off after one step), and it took
    # (1 - beta2) as float32(0.001) (the kernel's 1 - 0.999f is 1.3e-5 away: 5e-9 after one
    # step, 2e-4 in the loss after 40, Adam's normalisation amplifying it).
    engine, batches = engine_and_batches(tmp_path, 40, *overrides)
    host, plain = engine(LocalGroup()), engine(PaddleOptimizerGroup())
    assert isinstance(host.opt.parts["tables"], RowAdam)
    assert not isinstance(plain.opt.parts["tables"], RowAdam)
    host_losses = [step(host, b) for b in batches]
    assert host_losses == [step(plain, b) for b in batches]
    assert host_losses[-1] < host_losses[0] - 0.1  # it trained
    assert len(host.opt.parts["tables"].state_dict()) == 4 * (2 if overrides else 1)
    assert_same_model(host, plain)


@pytest.mark.parametrize("direction", ["host-to-paddle", "paddle-to-host", "host-to-host"])
def test_a_checkpoint_resumes_as_the_uninterrupted_run(tmp_path: Path, direction: str) -> None:
    engine, batches = engine_and_batches(tmp_path, 30)
    first_group, second_group = {
        "host-to-paddle": (LocalGroup, PaddleOptimizerGroup),
        "paddle-to-host": (PaddleOptimizerGroup, LocalGroup),
        "host-to-host": (LocalGroup, LocalGroup)}[direction]
    first, reference = engine(first_group()), engine(first_group())
    for batch in batches[:15]:
        step(first, batch)
        step(reference, batch)
    resumed = engine(second_group())
    resumed.restore(Checkpoint(tmp_path, 1, {}), first.state(tmp_path, 1))
    assert [step(resumed, b) for b in batches[15:]] == [step(reference, b) for b in batches[15:]]
    assert_same_model(resumed, reference)


def test_a_table_looked_up_twice_in_a_step_sums_both_gradients() -> None:
    paddle.seed(3)
    host = IdTable(40, 3, sparse=True)
    plain = paddle.nn.Embedding(40, 3, sparse=True)
    plain.set_state_dict(host.state_dict())
    before = host.weight.numpy().copy()
    row_adam = RowAdam([host], 0.01, 0.9, 0.999, 1e-8)
    paddle_adam = paddle.optimizer.Adam(0.01, parameters=plain.parameters(), lazy_mode=True)
    first = paddle.to_tensor(np.array([[5, 9, 5], [1, 9, 39]], dtype="int64"))
    second = paddle.to_tensor(np.array([[9, 2], [5, 5]], dtype="int64"))
    for _ in range(2):  # the second step weighs the gradients, not only their signs
        for layer, opt in ((host, row_adam), (plain, paddle_adam)):
            out = layer(first).sum() * 2.0 + (layer(second) * layer(second)).sum()
            out.backward()
            opt.step()
            opt.clear_grad()
    np.testing.assert_array_equal(host.weight.numpy(), plain.weight.numpy())
    assert host.touched == []
    moved = np.flatnonzero((host.weight.numpy() != before).any(axis=1))
    assert moved.tolist() == [1, 2, 5, 9, 39]  # lazy: only the rows looked up


def test_collective_ranks_merge_their_rows_alike_in_rank_order() -> None:
    """mode=collective: each rank's distinct rows and gradients, gathered, become one sorted
    set of rows whose gradients are summed in rank order and averaged over the ranks, as
    DataParallel's sparse all-gather and Paddle's merge give them, the same on every rank.
    (A 200k-row W&D collective run trained to the same parameters, byte for byte, as with
    Paddle's lazy Adam on the all-gathered SelectedRows: docs/performance.md.)"""
    from recrunner.fleet.collective import CollectiveGroup

    rng = np.random.default_rng(3)
    world = 3
    rows = [rng.permutation(np.unique(rng.integers(0, 5000, 400))) for _ in range(world)]
    grads = [rng.standard_normal((len(r), 7)).astype(np.float32) for r in rows]
    sent: list[np.ndarray] = []

    class Rank(CollectiveGroup):
        def __init__(self, rank: int, gather: list[np.ndarray] | None) -> None:
            self.rank, self.world, self.gathered = rank, world, gather

        def _all_gather(self, values: np.ndarray) -> list[np.ndarray]:
            if self.gathered is None:  # first pass: what this rank sends
                sent.append(values)
                return [values]
            return self.gathered

    for k in range(world):
        Rank(k, None).merge_rows(rows[k], grads[k])
    merged = [Rank(k, sent).merge_rows(rows[k], grads[k]) for k in range(world)]
    every = np.concatenate(rows)
    want_rows, index = np.unique(every, return_inverse=True)
    want = np.zeros((len(want_rows), 7), np.float32)
    np.add.at(want, index, np.concatenate(grads))  # in rank order, from zero
    want /= np.float32(world)
    assert len(want_rows) < len(every)  # some rows were looked up by more than one rank
    for got_rows, got in merged:
        np.testing.assert_array_equal(got_rows, want_rows)
        np.testing.assert_array_equal(got, want)
