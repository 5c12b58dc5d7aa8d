"""`recrun serve`'s gRPC port against hostile clients: half-open connections, a flood past the
connection limit, random bytes, oversized (and gzip-bombed) messages, calls whose message never
completes, clients cancelling mid-call. After each, a fresh tritonclient gets a prediction.

The bounds are grpc's own (recrunner/serving/grpc_server.py `limits`); each test fails if its
channel arg is dropped: without it the connections stay open (or the slots stay taken) past the
test's deadline."""

import os
import random
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from recrunner.config.compose import load
from recrunner.serving import client
from recrunner.serving.paddle_serving import GRPC_SERVICE
from recrunner.serving.server import Server

pytestmark = pytest.mark.slow
READ_TIMEOUT_S = 2.0  # the handshake (preface and SETTINGS) deadline
IDLE_S = 6.0  # serving.socket_timeout_s: an idle connection's life
MAX_CONNECTIONS = 230  # above the 200 half-open ones: they must not lock others out
MAX_RPCS = 6
AGE_S = 3.0  # grpc jitters it by up to 10%
REQUEST_TIMEOUT_S = 6.0
GRACE_S = READ_TIMEOUT_S + REQUEST_TIMEOUT_S  # after the GOAWAY of max_connection_age
# The idle timeout closes a connection that has not finished its handshake too, and the age (+
# grace) closes every connection: each deadline is checked before the next one could act.
MARGIN_S = 3.0
assert READ_TIMEOUT_S + MARGIN_S < IDLE_S and IDLE_S + MARGIN_S < AGE_S * 0.9 + GRACE_S
MAX_BODY = 200_000
PADDLE = f"/{GRPC_SERVICE}/inference"


@pytest.fixture(scope="module")
def server(trained_export: Path) -> Iterator[Server]:
    cfg = load(["serving.port=0", f"serving.model_dir={trained_export}",
                f"serving.max_body_bytes={MAX_BODY}", f"serving.read_timeout_s={READ_TIMEOUT_S}",
                f"serving.socket_timeout_s={IDLE_S}", f"serving.max_connections={MAX_CONNECTIONS}",
                f"serving.grpc_max_concurrent_rpcs={MAX_RPCS}",
                f"serving.grpc_max_connection_age_s={AGE_S}",
                f"serving.request_timeout_s={REQUEST_TIMEOUT_S}", "serving.watch_interval_s=0"])
    srv = Server(cfg.serving, trained_export)
    srv.start()
    assert srv.wait_ready(120), srv.app.failed
    yield srv
    srv.stop(5)


def infer(srv: Server, rows: int, compression: str | None = None) -> np.ndarray:
    """Probabilities for `rows` rows from tritonclient's gRPC client, as users call it."""
    import tritonclient.grpc as tg

    loaded = srv.app.plane.loaded
    assert loaded is not None
    dense = np.full((rows, 13), 0.5, np.float32)
    sparse = np.arange(rows * 26, dtype=np.int64).reshape(rows, 26) % 1000
    inputs = [tg.InferInput("dense", list(dense.shape), "FP32"),
              tg.InferInput("sparse_ids", list(sparse.shape), "INT64")]
    inputs[0].set_data_from_numpy(dense)
    inputs[1].set_data_from_numpy(sparse)
    triton = tg.InferenceServerClient(url=srv.grpc_target)
    try:
        result = triton.infer(loaded.name, inputs, client_timeout=10,
                              compression_algorithm=compression)
        return result.as_numpy("prob")
    finally:
        triton.close()


def served(srv: Server) -> bool:
    """A fresh client gets a prediction."""
    probs = infer(srv, 1)
    return probs.size == 1 and 0 < float(probs.ravel()[0]) < 1


def connect(srv: Server, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.grpc_port), timeout=10)
    if data:
        sock.sendall(data)
    return sock


def is_closed(sock: socket.socket) -> bool:
    """The server has closed `sock` (what it sent first, e.g. its SETTINGS, is skipped)."""
    sock.setblocking(False)
    try:
        while chunk := sock.recv(65536):
            del chunk
        return True
    except BlockingIOError:
        return False
    except OSError:  # a reset
        return True


def wait_for(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_200_half_open_connections_do_not_stop_a_client(server: Server) -> None:
    """80 connections that stop inside the HTTP/2 preface, 80 after it, 40 after their SETTINGS
    (handshake done, then silence): a client is served meanwhile; the first 160 are closed at
    the handshake deadline (serving.read_timeout_s), the other 40 once idle
    (serving.socket_timeout_s), and the server's file descriptors return to where they were."""
    assert served(server)
    before = fds()
    preface, settings = client.H2_PREFACE, client.H2_PREFACE + client.H2_SETTINGS
    started = time.monotonic()
    socks = ([connect(server, preface[:10]) for _ in range(80)]
             + [connect(server, preface) for _ in range(80)]
             + [connect(server, settings) for _ in range(40)])
    try:
        calls = 0
        while time.monotonic() - started < READ_TIMEOUT_S * 0.6:
            assert served(server)
            calls += 1
        assert calls >= 1 and not any(is_closed(s) for s in socks[:160])
        assert wait_for(lambda: all(is_closed(s) for s in socks[:160]),
                        started + READ_TIMEOUT_S + MARGIN_S - time.monotonic())
        assert wait_for(lambda: all(is_closed(s) for s in socks[160:]),
                        started + IDLE_S + MARGIN_S - time.monotonic())
    finally:
        for sock in socks:
            sock.close()
    assert served(server)
    assert wait_for(lambda: fds() <= before + 4, 5), (before, fds())


def test_connections_over_the_limit_are_closed_at_once(server: Server) -> None:
    """serving.max_connections half-open connections: one more is closed straight away (while
    the held ones still wait for their deadline); once those expire, clients are served."""
    started = time.monotonic()
    held = [connect(server, client.H2_PREFACE[:5]) for _ in range(MAX_CONNECTIONS)]
    try:
        with connect(server, client.H2_PREFACE + client.H2_SETTINGS) as extra:
            assert wait_for(lambda: is_closed(extra), READ_TIMEOUT_S)
        assert not any(is_closed(s) for s in held[-10:])  # the limit, not the deadline
        assert wait_for(lambda: all(is_closed(s) for s in held),
                        started + READ_TIMEOUT_S + MARGIN_S - time.monotonic())
    finally:
        for sock in held:
            sock.close()
    assert wait_for(lambda: served(server), 10)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_bytes_are_closed_at_once(server: Server, seed: int) -> None:
    """Random bytes in place of the preface, after it, or after SETTINGS: the connection is
    closed at once (a protocol error, before the handshake deadline of a connection opened
    alongside), and the server serves on."""
    noise = random.Random(seed).randbytes(300)
    sentinel = connect(server, client.H2_PREFACE[:10])
    try:
        for start in (b"", client.H2_PREFACE, client.H2_PREFACE + client.H2_SETTINGS):
            with connect(server, start + noise) as sock:
                assert wait_for(lambda: is_closed(sock), READ_TIMEOUT_S)  # noqa: B023
        assert not is_closed(sentinel)
    finally:
        sentinel.close()
    assert served(server)


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_oversized_messages_get_resource_exhausted(server: Server, compression: str | None
                                                    ) -> None:
    """A message over serving.max_body_bytes, sent as is or gzip-compressed (the compressed
    one is ~100 times smaller than the limit, and its size counts once decompressed):
    RESOURCE_EXHAUSTED; a message under the limit, compressed the same way, is served."""
    from tritonclient.utils import InferenceServerException

    rows = MAX_BODY // (13 * 4 + 26 * 8) + 10  # raw tensors: 260 bytes a row
    with pytest.raises(InferenceServerException) as err:
        infer(server, rows, compression)
    assert err.value.status() == "StatusCode.RESOURCE_EXHAUSTED", err.value.message()
    assert "\n" not in err.value.message()
    assert infer(server, 500, compression).size == 500
    assert served(server)


def test_calls_whose_message_never_completes_end_with_the_connection_age(server: Server
                                                                          ) -> None:
    """serving.grpc_max_concurrent_rpcs calls that send their headers and 10 of 100 bytes,
    then nothing: every slot is taken, so a client gets RESOURCE_EXHAUSTED (not a hang); the
    connection is told to go away after serving.grpc_max_connection_age_s, closed after its
    grace, and the slots come back."""
    with connect(server, client.stalled_grpc_call(PADDLE, streams=MAX_RPCS)) as sock:
        started = time.monotonic()

        def refused() -> bool:
            with grpc.insecure_channel(server.grpc_target) as channel:
                try:
                    channel.unary_unary(PADDLE)(b"", timeout=5)
                except grpc.RpcError as exc:
                    return exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            return False

        assert wait_for(refused, AGE_S)
        assert wait_for(lambda: is_closed(sock), AGE_S * 1.1 + GRACE_S + 5)
        assert time.monotonic() - started > AGE_S * 0.9  # the age ended it, nothing sooner
    assert wait_for(lambda: served(server), 10)


def test_clients_cancelling_mid_call(server: Server) -> None:
    """grpcio futures cancelled at random moments during 600-row calls: nothing is left in
    flight, the server serves on."""
    rng = np.random.default_rng(0)
    dense = rng.random((600, 13), dtype=np.float32)
    sparse = rng.integers(0, 1000, (600, 26))
    body = client.paddle_grpc_call(dense, sparse).body
    with grpc.insecure_channel(server.grpc_target) as channel:
        call = channel.unary_unary(PADDLE)
        for i in range(20):
            future = call.future(body, timeout=10)
            time.sleep(i * 0.001)
            future.cancel()
        assert len(call(body, timeout=10)) > 600 * 4  # a call on the same channel is answered
    assert wait_for(lambda: server.app.inflight == 0, 10)
    assert served(server)
