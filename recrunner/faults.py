"""Named fault points, for crash and full-disk tests: the process kills or stops itself at an
exact moment of a write instead of at a random one.

    RECRUNNER_FAULT=<point>[@<n>]=<action>[,...]

`point` is `<label>.<phase>` as `atomic` names them (e.g. `checkpoint.written`), `n` the hit
of that point to act on (default 1, counted per process), `action` `kill` (SIGKILL: nothing
runs after it) or `stop` (SIGSTOP: a test fills or remounts the disk, then SIGCONT). Unset,
a point costs one dict lookup. Tests in the same process register a callable with `on`.
"""

import os
import signal
from collections.abc import Callable

ENV = "RECRUNNER_FAULT"
_hits: dict[str, int] = {}
_callbacks: dict[str, Callable[[], None]] = {}


def _parse(spec: str) -> dict[str, tuple[int, str]]:
    plan: dict[str, tuple[int, str]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        where, _, action = item.partition("=")
        point, _, nth = where.partition("@")
        plan[point] = (int(nth or 1), action or "kill")
    return plan


def point(name: str) -> None:
    """Act if `name` is armed (by the environment or `on`) for this hit."""
    if name in _callbacks:
        _callbacks[name]()
    spec = os.environ.get(ENV)
    if not spec:
        return
    armed = _parse(spec).get(name)
    if armed is None:
        return
    _hits[name] = _hits.get(name, 0) + 1
    nth, action = armed
    if _hits[name] != nth:
        return
    if action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    else:
        os.kill(os.getpid(), signal.SIGKILL)


def on(name: str, callback: Callable[[], None] | None) -> None:
    """Run `callback` whenever `name` is reached in this process (None: disarm)."""
    if callback is None:
        _callbacks.pop(name, None)
    else:
        _callbacks[name] = callback
