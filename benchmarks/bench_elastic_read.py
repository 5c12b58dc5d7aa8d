"""What one elastic rank spends reading an epoch's global batches: its share parsed
(recrunner/data/lines.py) against every row parsed (how elastic ranks read before), both on
one thread, best of 3 each, CPU seconds (less sensitive than wall time to a shared machine).

    python benchmarks/bench_elastic_read.py [--rows 200000] [--world 2] [--batch 512]
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import quiet

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from recrunner.config.compose import load  # noqa: E402
from recrunner.data.reader import Shard, rebatch  # noqa: E402
from recrunner.data.synth import generate  # noqa: E402
from recrunner.train.reading import Reader  # noqa: E402


def best_cpu(read: object) -> float:
    times = []
    for _ in range(3):
        cpu = time.process_time()
        read()  # type: ignore[operator]
        times.append(time.process_time() - cpu)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    quiet.guard(parser)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.tsv"
        generate(data, args.rows, 7, 0)
        cfg = load([f"dataset.train={data}", f"dataset.test={data}", "dataset.cache_mib=0",
                    "dataset.parse_workers=1"])
        reader = Reader(cfg, Shard())

        def every_row() -> None:
            for _ in rebatch(reader.blocks(str(data)), args.batch):
                pass

        def my_share() -> None:
            for _ in reader.shares(str(data), args.batch, args.world, 0):
                pass

        before, after = best_cpu(every_row), best_cpu(my_share)
    print(f"{args.rows} rows, batch {args.batch}, world {args.world}: one rank's CPU seconds "
          f"a pass: every row parsed {before:.3f}, its share {after:.3f} "
          f"({before / after:.2f}x less)")


if __name__ == "__main__":
    main()
