"""A/B the parsing rows/s of bench_train.py between this checkout and another (e.g. the code
before dataset schemas), interleaved in one run, reporting medians.

    git archive c0600e7 recrunner | tar -x -C /tmp/old
    python benchmarks/ab_parse.py --old /tmp/old [--rows 300000] [--rounds 5]

Each round runs one fresh process per side; a process parses the file 3 times and keeps its
best rows/s, as bench_train.py's parse_criteo_tsv does, and its best rows per CPU-second (all
threads; less sensitive than wall time to other jobs on a shared machine).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import quiet

REPO = Path(__file__).resolve().parent.parent
# The parse loop of bench_train.py, for either API (Preprocessor before schemas, Schema after).
PARSE = """
import sys, time
from recrunner.config.dataset import DatasetConfig
from recrunner.data.errors import RowErrors
from recrunner.data.reader import iter_examples
try:
    from recrunner.data.schema import Schema, load_schema_config
    sc = load_schema_config("criteo")
    pre, cfg = Schema.from_config(sc, 1000001), DatasetConfig(name="t", train="", test="",
                                                             schema=sc)
except ImportError:
    from recrunner.data.transform import Preprocessor
    pre, cfg = Preprocessor(1000001, "log"), DatasetConfig(name="t", train="", test="")
best = best_cpu = 0.0
for _ in range(3):
    start, cpu = time.perf_counter(), time.process_time()
    rows = sum(len(b) for b in iter_examples(cfg, sys.argv[1], pre, RowErrors()))
    best = max(best, rows / (time.perf_counter() - start))
    best_cpu = max(best_cpu, rows / (time.process_time() - cpu))
print(best, best_cpu)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("--old", required=True, help="a checkout (or git archive) to compare")
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    sides = {"old": opts.old, "new": str(REPO)}
    rates: dict[str, list[float]] = {side: [] for side in sides}
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp, "train.tsv")
        subprocess.run([sys.executable, "-c", "import sys; from recrunner.data.synth import "
                        "generate; generate(sys.argv[1], int(sys.argv[2]), 7, 0)", str(data),
                        str(opts.rows)], check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        for _ in range(opts.rounds):
            for side, path in sides.items():
                out = subprocess.run([sys.executable, "-c", PARSE, str(data)], check=True,
                                     capture_output=True, text=True,
                                     env={**os.environ, "PYTHONPATH": path})
                wall, per_cpu = map(float, out.stdout.split())
                rates[side].append(wall)
                cpu[side].append(per_cpu)
    print(json.dumps({side: {"median_rows_per_sec": statistics.median(rates[side]),
                             "median_rows_per_cpu_sec": statistics.median(cpu[side]),
                             "rows_per_sec": [round(r) for r in rates[side]]}
                      for side in sides}))


if __name__ == "__main__":
    main()
