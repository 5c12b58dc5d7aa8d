"""What a training epoch shows while it runs: a progress bar with a total, a percentage and
an ETA on a terminal; plain periodic log lines elsewhere (pod logs, CI, a file), where `\\r`
frames would pile up."""

import logging
import sys
import time
from typing import Any

log = logging.getLogger("recrunner.train")
LINE_EVERY_S = 30.0  # plain lines: at most one per this many seconds


class EpochProgress:
    def __init__(self, desc: str, total: int | None, enabled: bool,
                 stream: Any = None) -> None:
        self.desc, self.total, self.enabled = desc, total, enabled
        self.stream = stream or sys.stderr
        self.done = 0
        self.loss: float | None = None
        self.start = self.last_line = time.perf_counter()
        self.bar: Any = None
        if enabled and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(desc=desc, total=total, unit="ex", unit_scale=True,
                            mininterval=1.0, file=self.stream)

    def update(self, examples: int, loss: float | None = None) -> None:
        if not self.enabled:
            return
        self.done += examples
        if loss is not None:
            self.loss = loss
        if self.bar is not None:
            if self.total is not None and self.done > self.total:
                self.bar.total = self.done  # the estimate was short
            self.bar.update(examples)
            if loss is not None:
                self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            return
        now = time.perf_counter()
        if now - self.last_line >= LINE_EVERY_S:
            self.last_line = now
            log.info("%s", self.line(now))

    def line(self, now: float) -> str:
        rate = self.done / max(now - self.start, 1e-9)
        parts = [f"{self.desc}: {self.done:,} examples"]
        if self.total:
            left = max(self.total - self.done, 0)
            parts[0] += f" of ~{self.total:,} ({100 * self.done / self.total:.0f}%)"
            parts.append(f"ETA {left / max(rate, 1e-9):.0f}s")
        parts.append(f"{rate:,.0f} examples/s")
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4f}")
        return ", ".join(parts)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "EpochProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
