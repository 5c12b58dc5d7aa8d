"""Every benchmark's first call: figures only from a quiet machine, or marked as not.

    import quiet
    quiet.guard(parser)          # right after argparse.ArgumentParser(...), before parse_args

On 2 shared cores a busy host moves every figure, CPU-seconds included, by ±15% or more, so a
benchmark prints the CPU model and the 1-minute load average when it starts and when it ends
(stderr), and refuses to run (exit 4, one line) when the load is over `LIMIT` at start.
`--under-load` runs it anyway, and then every line it prints says so: a JSON line gets
`"under_load": <load at start>`, any other line starts with `[under load <load>]`. (Output of
a subprocess that writes straight to the terminal is not marked.)
"""

import argparse
import atexit
import io
import json
import os
import sys
from typing import TextIO

LIMIT = 1.5
FLAG = "--under-load"
EXIT_BUSY = 4
CHILD = "RECRUNNER_BENCH_CHILD"  # set by a benchmark for the worker processes it starts


def cpu_model() -> str:
    """The model name, family/model and widest vector unit: hosts of one name differ."""
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return "unknown CPU"
    flags = info.get("flags", "").split()
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return (f"{info.get('model name', 'unknown CPU')} (family {info.get('cpu family', '?')}, "
            f"model {info.get('model', '?')}, {vector})")


def load() -> float:
    return os.getloadavg()[0]


class Marked(io.TextIOBase):
    """A text stream that marks each complete line it passes on as taken under load."""

    def __init__(self, inner: TextIO, at_start: float) -> None:
        self.inner, self.at_start, self.pending = inner, round(at_start, 2), ""

    def mark(self, line: str) -> str:
        text = line.strip()
        if text.startswith("{") and text.endswith("}"):
            try:
                row = json.loads(text)
            except ValueError:
                row = None
            if isinstance(row, dict):
                return json.dumps({**row, "under_load": self.at_start})
        return f"[under load {self.at_start}] {line}" if text else line

    def write(self, s: str) -> int:
        *lines, self.pending = (self.pending + s).split("\n")
        for line in lines:
            self.inner.write(self.mark(line) + "\n")
        return len(s)

    def flush(self) -> None:
        if self.pending:
            self.inner.write(self.mark(self.pending))
            self.pending = ""
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()


def guard(parser: argparse.ArgumentParser | None = None, argv: list[str] | None = None) -> bool:
    """Check the machine before the benchmark runs; True when it runs under load. Takes
    `--under-load` out of `argv` (sys.argv), so the script's own parser never sees it."""
    argv = sys.argv if argv is None else argv
    if parser is not None:
        parser.add_argument(FLAG, action="store_true",
                            help=f"run even when the load average is over {LIMIT}; every "
                                 "printed line then says so")
    if "-h" in argv[1:] or "--help" in argv[1:] or os.environ.get(CHILD):
        # A benchmark's own worker process: the run was checked when it started, and the
        # load now is the benchmark's own.
        return False
    under_load = FLAG in argv
    while FLAG in argv:
        argv.remove(FLAG)
    at_start = load()
    name = os.path.basename(argv[0]) if argv else "benchmark"
    if at_start > LIMIT and not under_load:
        print(f"{name}: load average {at_start:.2f} is over {LIMIT}: on a busy machine the "
              f"figures measure the load; wait for a quiet one or pass {FLAG}",
              file=sys.stderr)
        sys.exit(EXIT_BUSY)
    print(f"{name}: {cpu_model()}, {os.cpu_count()} cores; load average {at_start:.2f} at "
          f"start", file=sys.stderr, flush=True)
    if at_start > LIMIT:
        sys.stdout = Marked(sys.stdout, at_start)
        sys.stderr = Marked(sys.stderr, at_start)

    def at_end() -> None:
        print(f"{name}: load average {load():.2f} at end", file=sys.stderr, flush=True)
        sys.stdout.flush()

    atexit.register(at_end)
    return at_start > LIMIT
