"""Identical mode=ps runs, one after another: test AUC, the machine's load average and each
trainer's training window, to see how much a PS configuration varies between runs.

    python benchmarks/bench_geo_swing.py [--rows 200000] [--runs 3] [--trainers 4]
        [--sync-mode geo] [--extra mode.geo_k_steps=10 ...] [--pace ROWS_PER_S] [--local]

Each trainer logs `epoch N: trained R rows in S s (wall clock T0-T1)` (recrunner/fleet/ps.py);
the start skew is the spread of the T0s, the end skew that of the T1s. Data and runs: those of
bench_modes.py (generate(…, 7, 0/1)), Wide & Deep, 1,000,001-row table, batch 512, 1 epoch.

`--pace R` feeds each trainer at most R rows a second, so that the job's processes mostly do
not run at the same time: what the shared cores cost, without a machine with a core per
process. The trainers' C++ data feed reads each file through `cat FILE | cat`; the benchmark
puts a `cat` first on the job's PATH that, when it reads its standard input, passes it on at
that pace (recrunner itself is not changed). `--local` trains mode=local on the same rows first.
"""

import argparse
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import quiet

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_modes import make_data, run  # noqa: E402 - the one benchmark runner and data

WINDOW = re.compile(r"trained (\d+) rows in ([\d.]+)s \(wall clock ([\d.]+)-([\d.]+)\)")


def windows(run: Path) -> list[tuple[int, float, float]]:
    """(rows, start, end) of each trainer's training, from its log."""
    out = []
    for log in sorted((run / "logs").glob("workerlog.*")):
        m = WINDOW.search(log.read_text(errors="replace"))
        if m:
            out.append((int(m.group(1)), float(m.group(3)), float(m.group(4))))
    return out


# Passes stdin to stdout at sys.argv[1] lines a second (a MultiSlot line is one row).
PACER = """import sys, time
rate, start, n = float(sys.argv[1]), time.perf_counter(), 0
for line in sys.stdin:
    sys.stdout.write(line)
    n += 1
    if n % 64 == 0:
        sys.stdout.flush()
        ahead = n / rate - (time.perf_counter() - start)
        if ahead > 0:
            time.sleep(ahead)
sys.stdout.flush()
"""


def paced_path(root: Path, rows_per_s: float) -> str:
    """A PATH whose `cat` paces its standard input (file arguments go to the real cat)."""
    real = shutil.which("cat")
    bin_dir = root / "paced-bin"
    bin_dir.mkdir()
    (bin_dir / "pace.py").write_text(PACER)
    shim = bin_dir / "cat"
    pacer = shlex.join([sys.executable, str(bin_dir / "pace.py"), str(rows_per_s)])
    shim.write_text(f'#!/bin/sh\n[ $# -gt 0 ] && exec {shlex.quote(str(real))} "$@"\n'
                    f"exec {pacer}\n")
    shim.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trainers", type=int, default=4)
    parser.add_argument("--sync-mode", default="geo")
    parser.add_argument("--extra", nargs="*", default=["mode.geo_k_steps=10"])
    parser.add_argument("--pace", type=float, default=0.0,
                        help="rows a second per trainer (0: as fast as it goes)")
    parser.add_argument("--local", action="store_true", help="train mode=local first")
    args = parser.parse_args()
    if args.pace < 0:
        parser.error(f"--pace {args.pace:g}: rows a second cannot be negative (0: not paced)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_data(root, args.rows)
        if args.local:
            print(f"mode=local: AUC {run(['mode=local'], data, root / 'local')['auc']:.4f}")
        env = dict(os.environ)
        if args.pace:
            env["PATH"] = paced_path(root, args.pace)
        pace = f", paced to {args.pace:g} rows/s per trainer" if args.pace else ""
        print(f"{args.rows} rows, {args.trainers} trainers, {args.sync_mode}, {args.extra}{pace}")
        print(f"{'run':>3}{'AUC':>8}{'load':>7}{'wall s':>9}{'start skew':>12}"
              f"{'end skew':>10}  rows per trainer")
        for i in range(args.runs):
            out = root / f"run{i}"
            load = os.getloadavg()[0]
            start = time.perf_counter()
            auc = run(["mode=ps", "mode.servers=1", f"mode.trainers={args.trainers}",
                       f"mode.sync_mode={args.sync_mode}", *args.extra], data, out, env=env)["auc"]
            w = windows(out)
            starts, ends = [s for _, s, _ in w], [e for _, _, e in w]
            print(f"{i:>3}{auc:>8.4f}{load:>7.1f}{time.perf_counter() - start:>9.0f}"
                  f"{max(starts) - min(starts):>12.1f}{max(ends) - min(ends):>10.1f}  "
                  f"{[r for r, _, _ in w]}", flush=True)


if __name__ == "__main__":
    main()
