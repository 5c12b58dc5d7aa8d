"""Paddle's PS gloo rendezvous without its 5-second poll.

Server 0 of a PS job hosts the trainers' gloo rendezvous, an HTTP key-value store in a child
process (`role_maker._init_http`), and its fleet.init waits for that child. The child checks
whether every trainer has fetched its keys once before any can have, then only every 5 s: a
job's servers started listening 5 s late (10 s when the trainers took longer than 5 s to
import Paddle), and the trainers waited for them. Polling every POLL_S changes nothing but
when the host notices: a local PS job takes 20.7 s instead of 24.1-25.7 (the test matrix's
DeepFM, 2 trainers). (Collective jobs under the launcher measured no such wait.)
"""

import time
from typing import Any

POLL_S = 0.05


class _ShortSleeps:
    """The `time` module, with sleeps capped at POLL_S (the KV-server loop is role_maker's
    only caller of time.sleep; tests/test_rendezvous.py checks that it stays so)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(min(seconds, POLL_S))


def poll_rendezvous_quickly() -> None:
    """Make this process's gloo rendezvous host (and the child it forks) poll every POLL_S.
    Call before fleet.init."""
    from paddle.distributed.fleet.base import role_maker

    # Deliberate patch of a Paddle internal: the loop's period is not a setting.
    role_maker.time = _ShortSleeps()  # type: ignore[assignment]
