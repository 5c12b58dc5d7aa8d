"""`recrun serve` against hostile clients: the OpenAPI document checked by schemathesis on the
live server, slow senders, connection floods, oversized and truncated requests, chunked and
pipelined requests, and clients that vanish mid-reply. After each, the server serves on."""

import gzip
import http.client
import json
import re
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from recrunner.config.compose import load
from recrunner.serving import routes
from recrunner.serving.server import Server

pytestmark = pytest.mark.slow
READ_TIMEOUT_S = 3.0
MAX_CONNECTIONS = 230  # above the 200 slow clients: they must not lock others out
ROW = b"\t".join([b"1"] * 13 + [b"68fd1e64"] * 26) + b"\n"


@pytest.fixture(scope="module")
def server(trained_export: Path) -> Iterator[Server]:
    cfg = load(["serving.port=0", f"serving.model_dir={trained_export}",
                "serving.max_body_bytes=2000000", f"serving.read_timeout_s={READ_TIMEOUT_S}",
                f"serving.max_connections={MAX_CONNECTIONS}", "serving.socket_timeout_s=20",
                "serving.watch_interval_s=0"])
    srv = Server(cfg.serving, trained_export)
    srv.start()
    assert srv.wait_ready(120), srv.app.failed
    yield srv
    srv.stop(5)


def served(srv: Server) -> bool:
    """A fresh client gets a prediction."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        conn.request("POST", "/predict", ROW, {"Content-Type": "text/plain"})
        resp = conn.getresponse()
        return resp.status == 200 and len(json.loads(resp.read())["predictions"]) == 1
    finally:
        conn.close()


def connect(srv: Server, timeout: float = 10) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.port), timeout=timeout)


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (fails the test if it does not, by the timeout)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def wait_for(check: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


# --- the OpenAPI document, and schemathesis against the live server -------------------------

def test_openapi_document_is_served_and_covers_every_route(server: Server) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/openapi.json")
    resp = conn.getresponse()
    doc = json.loads(resp.read())
    assert resp.status == 200 and doc == routes.document()
    assert {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops} == {
        (r.path, m) for r in routes.ROUTES for m in r.methods}
    # Every documented path is routed (a 404 would mean the table and the router disagree).
    for route in routes.ROUTES:
        path = route.path.replace("{name}", "x").replace("{version}", "1")
        conn.request(route.methods[0], path, b"{}" if route.methods[0] == "POST" else None)
        resp = conn.getresponse()
        body = resp.read()
        # 404 for model "x" is fine; "no such path" is not.
        assert resp.status != 404 or b"no such path" not in body, (path, resp.status)
    conn.close()


def test_router_serves_exactly_the_route_table() -> None:
    """A row without a handler (published, not served) or a handler without a row (served,
    not published) stops the server from being built."""
    from recrunner.serving.router import Router, error_reply

    router = Router()
    with pytest.raises(KeyError, match="no row"):
        router.bind("v3_infer", lambda r, p: error_reply(r, 500, ""))
    router.bind("predict", lambda r, p: error_reply(r, 500, ""))
    with pytest.raises(KeyError, match="v2_infer"):
        router.check()


@pytest.fixture(scope="module")
def api_schema(server: Server) -> object:
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")
# Paddle Serving's protobuf bodies: schemathesis sends bytes for a binary body of a media type
# it knows how to write.
schemathesis.serializer.alias(routes.PROTO, "application/octet-stream")
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance]


@schema.parametrize()
@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_document(case: schemathesis.Case) -> None:
    """Generated requests (valid and invalid, every route): no 5xx, and every reply's status,
    content type, headers and body are those the document declares."""
    headers: dict[str, Any] = dict(case.headers or {})
    coding = str(headers.get("Content-Encoding", "")).strip().lower()
    if coding not in ("gzip", "x-gzip", "deflate"):
        case.call_and_validate(checks=CHECKS, timeout=30)
        return
    # schemathesis sends the header over a plain body, which would only ever reach the 400
    # (tests/test_serving_protocols.py has that one): compress the body it wrote.
    kwargs = case.as_transport_kwargs()
    if "json" in kwargs:
        kwargs["data"] = json.dumps(kwargs.pop("json")).encode()
        kwargs["headers"].setdefault("Content-Type", "application/json")
    data = kwargs.get("data") or b""
    kwargs["data"] = gzip.compress(data) if "gzip" in coding else zlib.compress(data)
    response = requests.request(**kwargs, timeout=30)
    case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)


# --- slow and greedy clients --------------------------------------------------------------

def test_200_slow_clients_do_not_stop_others(server: Server) -> None:
    """200 connections dripping a request a byte a second: others are served meanwhile, and
    each slow one is answered 408 and closed once serving.read_timeout_s has passed."""
    head = b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 400\r\n\r\n"
    slow = [connect(server) for _ in range(200)]
    try:
        started = time.monotonic()
        for sock in slow:
            sock.sendall(head[:1])
        sent, ok = 1, 0
        while time.monotonic() - started < READ_TIMEOUT_S * 0.7:
            assert served(server)
            ok += 1
            if time.monotonic() - started >= sent:  # a byte a second on every slow socket
                for sock in slow:
                    sock.sendall(head[sent:sent + 1])
                sent += 1
        assert ok >= 3 and sent >= 2
        replies = []
        for sock in slow:
            sock.settimeout(READ_TIMEOUT_S + 5)
            replies.append(read_all(sock))  # closed by the server at its deadline
    finally:
        for sock in slow:
            sock.close()
    assert all(r.startswith(b"HTTP/1.1 408") for r in replies), {r[:40] for r in replies}
    assert served(server)


def test_connections_over_the_limit_get_503_not_a_hang(server: Server) -> None:
    assert wait_for(lambda: server.app.connections.open == 0, 10)  # type: ignore[union-attr]
    held = [connect(server) for _ in range(MAX_CONNECTIONS)]
    try:
        assert wait_for(lambda: server.app.connections.open == MAX_CONNECTIONS, 10)  # type: ignore[union-attr]
        with connect(server) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_all(extra).startswith(b"HTTP/1.1 503")
    finally:
        for sock in held:
            sock.close()
    assert wait_for(lambda: served(server), 10)


@pytest.mark.parametrize("request_bytes,status", [
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", b"414"),
    (b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", b"431"),
    (b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(120)) + b"\r\n",
     b"431"),
    (b"POST /predict HTTP/1.1\r\nContent-Length: 2000001\r\n\r\n" + b"a" * 2_000_001, b"413"),
    (b"POST /predict HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
     b"411"),
    (b"POST /predict HTTP/1.1\r\nContent-Length: -3\r\n\r\n", b"400"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)) + b"\r\n\r\n", b"400"),
    # A proxy and the server must not read two lengths (request smuggling): 400, closed.
    (b"POST /predict HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\n" + ROW,
     b"400"),
    (b"POST /predict HTTP/1.1\r\nContent-Length: 3\r\n 40\r\n\r\n" + ROW, b"400"),
    (b"POST /predict HTTP/1.1\r\nContent-Length : 40\r\n\r\n" + ROW, b"400"),
    (b"GET /healthz HTTP/2.0\r\n\r\n", b"505"),
    (b"GET /healthz HTTP/1.x\r\n\r\n", b"400"),
    (b"GET /healthz\r\n\r\n", b"400"),
], ids=["long-request-line", "long-header", "too-many-headers", "big-body", "chunked",
        "negative-length", "tls-hello", "two-lengths", "folded-line", "space-before-colon",
        "http-2", "bad-version", "http-0.9"])
def test_oversized_and_malformed_requests_are_answered_and_closed(
        server: Server, request_bytes: bytes, status: bytes) -> None:
    with connect(server) as sock:
        sock.sendall(request_bytes)
        reply = read_all(sock)  # and the server closes the connection
    assert reply.split(b" ", 2)[1] == status, reply[:200]
    assert served(server)


def test_body_shorter_than_its_content_length(server: Server) -> None:
    head = b"POST /predict HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 5000\r\n\r\n"
    with connect(server) as sock:  # the client says it is done: 400 at once
        sock.sendall(head + ROW)
        sock.shutdown(socket.SHUT_WR)
        reply = read_all(sock)
    assert reply.startswith(b"HTTP/1.1 400") and b"of the 5000 bytes" in reply
    with connect(server) as sock:  # the client waits: 408 after serving.read_timeout_s
        sock.sendall(head + ROW)
        reply = read_all(sock)
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert served(server)


def test_pipelined_requests_are_answered_in_order(server: Server) -> None:
    body = ROW * 3
    with connect(server) as sock:
        sock.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"POST /predict HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body
                     + b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = read_all(sock)
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", data)
    assert statuses == [b"200", b"200", b"404"], data
    assert data.count(b'"predictions"') == 1


def test_http_1_0_keep_alive_is_answered_as_such(server: Server) -> None:
    """HTTP/1.0 keeps a connection only when both sides say keep-alive (ApacheBench -k hung
    on replies that did not): the header is sent, and a second request is served on it."""
    ask = (b"POST /predict HTTP/1.0\r\nConnection: Keep-Alive\r\nContent-Type: text/plain\r\n"
           b"Content-Length: " + str(len(ROW)).encode() + b"\r\n\r\n" + ROW)
    with connect(server) as sock:
        replies = []
        for _ in range(2):
            sock.sendall(ask)
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
            while len(body) < length:
                body += sock.recv(65536)
            replies.append((head, body))
    for head, body in replies:
        assert head.startswith(b"HTTP/1.1 200") and b"Connection: keep-alive" in head, head
        assert len(json.loads(body)["predictions"]) == 1
    with connect(server) as sock:  # without keep-alive, HTTP/1.0 ends with the reply
        sock.sendall(ask.replace(b"Connection: Keep-Alive\r\n", b""))
        data = read_all(sock)
    assert data.startswith(b"HTTP/1.1 200") and b"Connection: close" in data


def test_expect_100_continue_gets_its_interim_reply(server: Server) -> None:
    with connect(server) as sock:
        sock.sendall(b"POST /predict HTTP/1.1\r\nContent-Type: text/plain\r\nExpect: "
                     b"100-continue\r\nContent-Length: " + str(len(ROW)).encode() + b"\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(ROW)
        sock.shutdown(socket.SHUT_WR)  # no next request: the server then closes
        reply = read_all(sock)
    assert reply.startswith(b"HTTP/1.1 200") and b'"predictions"' in reply, reply[:200]


def test_client_vanishing_mid_reply(server: Server) -> None:
    """A big reply to a client that resets the connection after a few bytes: nothing is left
    waiting, nothing is logged as a crash, the next client is served."""
    body = ROW * 6000  # a reply of ~100 kB to a 4 kB receive buffer
    for _ in range(3):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(b"POST /predict HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # RST while the server may still be writing
    assert wait_for(lambda: server.app.inflight == 0, 10)
    assert served(server)


def test_unsupported_methods_get_405_with_allow(server: Server) -> None:
    for method in ("PATCH", "OPTIONS", "HEAD", "DELETE"):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request(method, "/predict")
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 405 and resp.getheader("Allow") == "POST", method
        conn.close()

