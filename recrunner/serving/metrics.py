"""Prometheus text-format metrics, kept by hand (no client library needed for a few series)."""

import threading
from bisect import bisect_left
from collections import defaultdict

# Request latency buckets (seconds): sub-millisecond resolution where batch-1 requests land.
BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PREFIX = "recrun_serving"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.rows: dict[str, int] = defaultdict(int)
        self.hist: dict[str, list[int]] = defaultdict(lambda: [0] * (len(BUCKETS) + 1))
        self.sums: dict[str, float] = defaultdict(float)

    def observe(self, endpoint: str, status: int, seconds: float, rows: int = 0) -> None:
        with self._lock:
            self.requests[(endpoint, status)] += 1
            self.hist[endpoint][bisect_left(BUCKETS, seconds)] += 1
            self.sums[endpoint] += seconds
            if rows:
                self.rows[endpoint] += rows

    def render(self, gauges: dict[str, tuple[str, float]],
               counters: dict[str, tuple[str, float]]) -> str:
        """The exposition text; `gauges`/`counters`: name -> (help, value) sampled by the caller."""
        out: list[str] = []
        with self._lock:
            out += [f"# HELP {PREFIX}_requests_total HTTP requests by endpoint and status code.",
                    f"# TYPE {PREFIX}_requests_total counter"]
            for (endpoint, status), n in sorted(self.requests.items()):
                out.append(f'{PREFIX}_requests_total{{endpoint="{endpoint}",code="{status}"}} {n}')
            out += [f"# HELP {PREFIX}_rows_total Rows scored, by endpoint.",
                    f"# TYPE {PREFIX}_rows_total counter"]
            for endpoint, n in sorted(self.rows.items()):
                out.append(f'{PREFIX}_rows_total{{endpoint="{endpoint}"}} {n}')
            name = f"{PREFIX}_request_duration_seconds"
            out += [f"# HELP {name} Time from request line to reply written.",
                    f"# TYPE {name} histogram"]
            for endpoint, counts in sorted(self.hist.items()):
                total = 0
                for le, n in zip((*BUCKETS, float("inf")), counts, strict=True):
                    total += n
                    bound = "+Inf" if le == float("inf") else repr(le)
                    out.append(f'{name}_bucket{{endpoint="{endpoint}",le="{bound}"}} {total}')
                out.append(f'{name}_sum{{endpoint="{endpoint}"}} {self.sums[endpoint]:.6f}')
                out.append(f'{name}_count{{endpoint="{endpoint}"}} {total}')
        for kind, series in (("gauge", gauges), ("counter", counters)):
            for metric, (text, value) in series.items():
                out += [f"# HELP {PREFIX}_{metric} {text}", f"# TYPE {PREFIX}_{metric} {kind}",
                        f"{PREFIX}_{metric} {_num(value)}"]
        return "\n".join(out) + "\n"
