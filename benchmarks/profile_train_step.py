"""Where a training step's time goes: the trainer's own step on batches held in memory, timed
and then under Paddle's profiler (the operator table, totals over the profiled steps); and the
compute limit on this machine: examples/s of a step that did nothing but the network's GEMMs.

    python benchmarks/profile_train_step.py [--steps 50] [--rounds 3] [config overrides ...]

e.g. `... model.fc_sizes=[256,128]` or `runner.threads=1`. The README's step breakdown comes
from this script.
"""

import argparse
import json
import statistics
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

import quiet

from recrunner.config.compose import load
from recrunner.data.reader import Shard
from recrunner.data.synth import generate
from recrunner.train.dygraph import DygraphEngine
from recrunner.train.group import LocalGroup
from recrunner.train.reading import Reader

WARMUP = 20


def gemm_limit(net: Any, batch_size: int, reps: int = 30) -> float:
    """Examples/s of the net's dense-layer GEMMs alone (every 2-D parameter outside an
    embedding table, as x @ W forward and the input and weight gradients backward), at this
    batch size and the process's threads: what no dygraph step can beat on this machine."""
    import paddle

    tables = {id(layer.weight) for layer in net.sublayers()
              if isinstance(layer, paddle.nn.Embedding)}
    seconds = 0.0
    for p in net.parameters():
        if len(p.shape) != 2 or id(p) in tables:
            continue
        k, n = p.shape
        x, g, w = (paddle.randn(s) for s in ([batch_size, k], [batch_size, n], [k, n]))
        # forward x @ W; backward g @ W^T (input gradient) and x^T @ g (weight gradient)
        for a, b, ta, tb in ((x, w, False, False), (g, w, False, True), (x, g, True, False)):
            times = []
            for _ in range(reps):
                start = time.perf_counter()
                paddle.matmul(a, b, transpose_x=ta, transpose_y=tb)
                times.append(time.perf_counter() - start)
            seconds += statistics.median(times)
    return batch_size / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3,
                        help="the step and the GEMM limit, timed alternately this many times")
    parser.add_argument("overrides", nargs="*")
    opts = parser.parse_args()
    if opts.steps < 1 or opts.rounds < 1:
        parser.error("--steps and --rounds must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        train = Path(tmp, "train.tsv")
        cfg = load([f"runner.output_dir={tmp}/run", "runner.progress=false",
                    f"dataset.train={train}", *opts.overrides])
        rows = (WARMUP + 2 * opts.steps) * cfg.runner.batch_size
        generate(train, rows, cfg.runner.seed, 0)
        reader = Reader(cfg, Shard())
        trainer = DygraphEngine(cfg, LocalGroup(), reader)
        # Parsed up front: the step alone, without the data pipeline sharing the cores.
        batches = list(islice(reader.batches(str(train), cfg.runner.batch_size),
                              WARMUP + 2 * opts.steps))
        for batch in batches[:WARMUP]:
            trainer.train_step(batch)

        # The step and the limit alternate, round after round: each moves on this host
        # (the limit by up to 45% between runs), and a ratio of two figures taken minutes
        # apart would carry both drifts. The fraction reported is that of the medians.
        size = cfg.runner.batch_size
        steps, limits = [], []
        for _ in range(opts.rounds):
            seconds = []
            for batch in batches[WARMUP:WARMUP + opts.steps]:
                start = time.perf_counter()
                trainer.train_step(batch)
                seconds.append(time.perf_counter() - start)
            steps.append(statistics.median(seconds))
            limits.append(gemm_limit(trainer.net, size))
        step, limit = statistics.median(steps), statistics.median(limits)
        fractions = [size / s / lim for s, lim in zip(steps, limits, strict=True)]
        print(json.dumps({"bench": "train_step", "batch_size": size,
                          "threads": cfg.runner.threads, "median_step_ms": step * 1e3,
                          "examples_per_sec": size / step,
                          "rounds_step_ms": [round(s * 1e3, 2) for s in steps]}))
        print(json.dumps({"bench": "gemm_limit", "examples_per_sec": limit,
                          "step_fraction_of_limit": size / step / limit,
                          "rounds_examples_per_sec": [round(x) for x in limits],
                          "rounds_fraction": [round(f, 3) for f in fractions]}))

        import paddle.profiler as profiler

        prof = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU],
                                 on_trace_ready=lambda _: None)  # no trace files
        prof.start()
        for batch in batches[WARMUP + opts.steps:]:
            trainer.train_step(batch)
            prof.step()
        prof.stop()
        print(f"Paddle profiler, {opts.steps} steps (divide totals by {opts.steps} for ms/step):")
        prof.summary(op_detail=False, views=[profiler.SummaryView.OperatorView])


if __name__ == "__main__":
    main()
