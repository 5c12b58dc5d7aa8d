"""The HTTP transport: stdlib ThreadingHTTPServer (one thread per connection, HTTP/1.1
keep-alive). It reads a bounded body, undoes `Content-Encoding` (gzip, deflate) within the
same bound, hands a router.Request to the app, and writes the reply in one write, compressed
when the client's `Accept-Encoding` asks for it. The request threads parse and validate; the
MicroBatcher's predictor threads run the model (Paddle and ONNX Runtime release the GIL while
they compute, so parsing overlaps with prediction).

Connections are bounded and slow senders cut off by recrunner.serving.limits: at most
serving.max_connections at once (one more: 503 from the accept loop), and a request's head and
body must arrive within serving.read_timeout_s (else 408 and the connection closed). Any
method the path does not take is 405 with Allow; malformed heads get JSON replies too.
"""

import contextlib
import gzip
import re
import socket
import sys
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from recrunner.serving import http_head
from recrunner.serving.limits import ConnectionSlots, Deadlines, refuse
from recrunner.serving.protocol import BadRequest
from recrunner.serving.router import Reply, Request

if TYPE_CHECKING:
    from recrunner.serving.server import ServingApp

_NULS = re.compile(rb"\x00*")
_FEED = 1 << 16  # input per inflate call: what is left after a member is copied, so bounded
# Each member costs an inflater (~17 us): 100k empty ones in a 2 MB body took 1.7 s of CPU.
MAX_MEMBERS = 1000


def decode_body(body: bytes, encoding: str, limit: int) -> bytes:
    """`body` without its Content-Encoding, at most `limit` bytes once decoded.

    gzip: every member, as gzip.decompress reads them (clients may concatenate them; NUL
    padding between them is skipped); deflate: one zlib stream. Anything else after the data
    is a 400, never silently dropped."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise BadRequest(f"Content-Encoding {encoding!r} not supported (gzip, deflate)", 415)
    gz = "gzip" in encoding
    view = memoryview(body)
    parts: list[bytes] = []
    total = pos = members = 0
    while True:
        # wbits: 16+ for the gzip wrapper, + for zlib's (what HTTP calls deflate).
        inflater = zlib.decompressobj(31 if gz else 15)
        while not inflater.eof:
            chunk = view[pos:pos + _FEED]
            try:
                out = inflater.decompress(chunk, limit + 1 - total)
            except zlib.error as exc:
                where = f" (member {members + 1})" if members else ""
                raise BadRequest(f"invalid {encoding} body{where}: {exc}") from exc
            total += len(out)
            if total > limit:
                raise BadRequest(f"body is over serving.max_body_bytes={limit} once "
                                 "decompressed", 413)
            used = len(chunk) - len(inflater.unconsumed_tail) - len(inflater.unused_data)
            if not inflater.eof and not used and not out:
                raise BadRequest(f"invalid {encoding} body: truncated")
            parts.append(out)
            pos += used
        members += 1
        if members > MAX_MEMBERS:
            raise BadRequest(f"invalid {encoding} body: more than {MAX_MEMBERS} members")
        if gz:
            pos = _NULS.match(body, pos).end()  # type: ignore[union-attr]  # always matches
        if pos == len(body):
            return b"".join(parts)
        if not gz or view[pos:pos + 2] != b"\x1f\x8b":
            raise BadRequest(f"invalid {encoding} body: {len(body) - pos} bytes after the end "
                             "of the compressed data")


def accepts(header: str, coding: str) -> bool:
    """Whether an Accept-Encoding header allows `coding` (q=0 refuses it)."""
    for part in header.lower().split(","):
        name, _, params = part.partition(";")
        if name.strip() == coding:
            q = params.strip().removeprefix("q=")
            try:
                return not params.strip() or float(q) > 0
            except ValueError:
                return True
    return False


def encode_reply(reply: Reply, accept_encoding: str) -> Reply:
    if not accept_encoding:  # asked for, it is given, however short (level 1: cheap)
        return reply
    if accepts(accept_encoding, "gzip"):
        reply.body = gzip.compress(reply.body, compresslevel=1, mtime=0)
        reply.headers["Content-Encoding"] = "gzip"
    elif accepts(accept_encoding, "deflate"):
        reply.body = zlib.compress(reply.body, 1)
        reply.headers["Content-Encoding"] = "deflate"
    return reply


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "recrun-serve"
    sys_version = ""
    app: "ServingApp"  # set on the subclass made per server

    def setup(self) -> None:
        super().setup()
        # One write per reply plus no Nagle: no 40 ms delayed-ACK stalls on keep-alive.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # per-request lines would cost more than the request; /metrics has the counts

    expired = False  # set by the Deadlines thread when the request came too slowly

    def parse_request(self) -> bool:
        """The stdlib's, with the head read by recrunner.serving.http_head (no email.parser):
        the request line and fields, then Connection and Expect: 100-continue."""
        self.command = None  # type: ignore[assignment]  # as the stdlib: none yet
        self.request_version = self.default_request_version
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        if not self.requestline.strip():
            return False
        try:
            self.command, self.path, self.request_version, version = \
                http_head.request_line(self.requestline)
            self.headers = http_head.read_fields(self.rfile)  # type: ignore[assignment]
        except http_head.HeadError as exc:
            self.send_error(exc.status, exc.reason)
            return False
        connection = (self.headers.get("Connection") or "").lower()
        self.close_connection = connection == "close" or \
            (version < (1, 1) and connection != "keep-alive")
        if (self.headers.get("Expect") or "").lower() == "100-continue" and version >= (1, 1):
            return self.handle_expect_100()
        return True

    def handle_one_request(self) -> None:
        """Wait for a request's first byte (an idle keep-alive: serving.socket_timeout_s), then
        give its head and body serving.read_timeout_s to arrive."""
        try:
            if not self.rfile.peek(1):  # type: ignore[attr-defined]  # a BufferedReader
                self.close_connection = True
                return
        except OSError:  # idle too long, or reset
            self.close_connection = True
            return
        deadlines = self.app.deadlines
        if deadlines is not None:
            deadlines.arm(self, self.connection, self.app.cfg.read_timeout_s)
        try:
            super().handle_one_request()
        finally:
            if deadlines is not None:
                deadlines.disarm(self)
        if self.expired:
            self.close_connection = True

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """The stdlib's replies to a malformed head (400, 414, 431, 501): a late head is 408."""
        if self.expired:
            code, message = 408, "request head not received within serving.read_timeout_s"
        self.close_connection = True
        reason = message or self.responses.get(code, ("bad request",))[0]
        with contextlib.suppress(OSError):  # as JSON and HTTP/1.1, like every other reply
            self._write(self.app.error(Request("", "", {}), code, reason)[1])

    def do_GET(self) -> None:
        self._serve(read_body=False)

    def do_POST(self) -> None:
        self._serve(read_body=True)

    def do_PUT(self) -> None:
        self._serve(read_body=True)

    def do_DELETE(self) -> None:
        self._serve(read_body=False)

    def __getattr__(self, name: str) -> Any:
        """Any other method (HEAD, PATCH, TRACE, ...): 405 with Allow (or 404), not the
        stdlib's 501 - the server knows the method, the path does not take it."""
        if name.startswith("do_"):
            return lambda: self._serve(read_body=False)
        raise AttributeError(name)

    _discard = 0

    def _serve(self, read_body: bool) -> None:
        app = self.app
        app.begin()
        t0 = time.perf_counter()
        path = self.path.split("?", 1)[0]
        try:
            if not read_body and (self.headers.get("Content-Length", "0").strip() != "0"
                                  or "Transfer-Encoding" in self.headers):
                self.close_connection = True  # an unread body would be read as a request
            endpoint, reply = self._reply(app, path, read_body)
            if reply is None:  # the client went away or stalled
                self.close_connection = True
                return
            if app.draining:
                self.close_connection = True
            # Counted before the reply goes out: a client that reads /metrics next sees it.
            app.metrics.observe(endpoint, reply.status, time.perf_counter() - t0, reply.rows)
            self._write(encode_reply(reply, self.headers.get("Accept-Encoding", "")))
            if self._discard:
                self._linger(self._discard)
        except OSError:
            self.close_connection = True
        finally:
            app.end()

    def _linger(self, length: int) -> None:
        """Read and drop an over-limit body for a moment, so the client (which is usually
        still sending) reads our 413 instead of a connection reset."""
        deadline = time.monotonic() + 2.0
        left = min(length, 4 * self.app.cfg.max_body_bytes)
        try:
            self.connection.settimeout(0.5)
            while left > 0 and time.monotonic() < deadline:
                chunk = self.rfile.read1(min(left, 1 << 16))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass

    def _reply(self, app: "ServingApp", path: str, read_body: bool
               ) -> tuple[str, Reply | None]:
        request = Request(self.command, path, self.headers)  # type: ignore[arg-type]
        if read_body:
            limit = app.cfg.max_body_bytes
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                self.close_connection = True
                return app.error(request, 411, "send a Content-Length (chunked bodies are "
                                               "not accepted)")
            length_text = self.headers.get("Content-Length")
            if length_text is None:
                self.close_connection = True
                return app.error(request, 411, "Content-Length required")
            try:
                length = int(length_text)
                if length < 0:
                    raise ValueError
            except ValueError:
                self.close_connection = True
                return app.error(request, 400, f"bad Content-Length {length_text!r}")
            if length > limit:
                self.close_connection = True  # the unread body would be parsed as a request
                self._discard = length
                return app.error(request, 413, f"body of {length} bytes is over "
                                               f"serving.max_body_bytes={limit}")
            try:
                body = self.rfile.read(length)
            except (TimeoutError, OSError):
                return "other", None
            if app.deadlines is not None:
                app.deadlines.disarm(self)
            if len(body) != length:
                self.close_connection = True
                if self.expired:
                    return app.error(request, 408, "body not received within serving."
                                                   f"read_timeout_s={app.cfg.read_timeout_s:g} "
                                                   f"({len(body)} of {length} bytes)")
                return app.error(request, 400, f"body ended after {len(body)} of the "
                                               f"{length} bytes of its Content-Length")
            try:
                request.body = decode_body(body, self.headers.get("Content-Encoding", ""),
                                           limit)
            except BadRequest as exc:
                request.body = b""
                return app.error(request, exc.status, exc.reason)
        if self.expired:  # its reading side is shut: no next request on this connection
            self.close_connection = True
            if not read_body:  # the head came late (and may be incomplete)
                return app.error(request, 408, "request not received within serving."
                                               f"read_timeout_s={app.cfg.read_timeout_s:g}")
        return app.handle(request)

    def _write(self, reply: Reply) -> None:
        head = (f"HTTP/1.1 {reply.status} {self.responses.get(reply.status, ('',))[0]}\r\n"
                f"Content-Type: {reply.content_type}\r\n"
                f"Content-Length: {len(reply.body)}\r\n")
        for name, value in reply.headers.items():
            head += f"{name}: {value}\r\n"
        if self.close_connection:
            head += "Connection: close\r\n"
        elif self.request_version == "HTTP/1.0":
            # An HTTP/1.0 client (ApacheBench -k, old proxies) that asked for keep-alive treats
            # a reply without this header as ending with the connection, and waits for a close.
            head += "Connection: keep-alive\r\n"
        body = b"" if self.command == "HEAD" else reply.body
        self.wfile.write(head.encode("latin-1") + b"\r\n" + body)


class HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # 8+ clients connecting at once must not hit SYN retries
    slots: ConnectionSlots
    deadlines: Deadlines

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread per connection, up to the slots; beyond them 503 from this thread."""
        if not self.slots.take():
            refuse(request, self.deadlines)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # resets and timeouts are the client's business
            return
        super().handle_error(request, client_address)
