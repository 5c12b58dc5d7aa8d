"""recrunner.fleet.rendezvous: a PS job's gloo rendezvous host polls every POLL_S, not every 5 s."""

import inspect
import time

import pytest

pytest.importorskip("paddle")


def test_the_rendezvous_loop_polls_quickly_and_nothing_else_sleeps_shorter() -> None:
    from paddle.distributed.fleet.base import role_maker

    from recrunner.fleet.rendezvous import POLL_S, poll_rendezvous_quickly

    # The patch caps every time.sleep of the module: it is safe only while the KV-server loop
    # is its only caller (a Paddle upgrade that adds one fails here).
    assert inspect.getsource(role_maker).count("time.sleep(") == 1
    saved = role_maker.time
    try:
        poll_rendezvous_quickly()
        start = time.perf_counter()
        role_maker.time.sleep(5)  # the loop's period
        assert time.perf_counter() - start < 20 * POLL_S
        assert role_maker.time.time() == pytest.approx(time.time(), abs=1.0)
    finally:
        role_maker.time = saved
