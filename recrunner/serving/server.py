"""`recrun serve`: the HTTP server.

Stdlib ThreadingHTTPServer (one thread per connection, HTTP/1.1 keep-alive); the request
threads parse and validate, the MicroBatcher's predictor threads run the model (Paddle releases
the GIL while it computes, so parsing overlaps with prediction). Measured against the targets
in benchmarks/bench_serving.py; see README.md in this directory. Connections are bounded and
slow senders cut off by recrunner.serving.limits; the model is held, and new exports swapped
in, by recrunner.serving.repository; the routes and the OpenAPI document are
recrunner.serving.routes.
"""

import contextlib
import logging
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from recrunner.config.serving import ServingConfig
from recrunner.errors import RecrunnerError
from recrunner.export import META_FILE
from recrunner.export.engines import PredictFn
from recrunner.serving import protocol, routes
from recrunner.serving.batcher import MicroBatcher, Overloaded, TimedOut
from recrunner.serving.combine import Combiner
from recrunner.serving.limits import ConnectionSlots, Deadlines, refuse
from recrunner.serving.metrics import PREFIX, Metrics
from recrunner.serving.protocol import BadRequest
from recrunner.serving.repository import LoadedModel, LoadRefused, ModelRepository

log = logging.getLogger(__name__)
JSON = "application/json"
INFERENCE_PATH = "/GeneralModelService/inference"


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = JSON
    rows: int = 0
    version: str = ""  # the model version that computed it (sent as a header)
    allow: str = ""  # 405: the methods the path takes


def json_reply(status: int, obj: Any, rows: int = 0) -> Reply:
    return Reply(status, protocol.dumps(obj), JSON, rows)


endpoint_of = routes.endpoint_of


def _no_model(dense: np.ndarray, sparse: np.ndarray) -> np.ndarray:
    raise RuntimeError("a prediction without its model version")


class ServingApp:
    """Endpoints, independent of the HTTP layer: (method, path, body) -> Reply."""

    def __init__(self, cfg: ServingConfig, model_dir: Path) -> None:
        self.cfg = cfg
        self.model_dir = model_dir
        self.metrics = Metrics()
        self.ready = threading.Event()
        self.failed: str | None = None
        self.draining = False
        self.batcher: MicroBatcher | None = None
        self.parser = Combiner(protocol.parse_many, cfg.max_batch_rows)
        self.repo = ModelRepository(model_dir, str(cfg.engine), cfg.threads,
                                    max(1, cfg.workers))
        self._inflight = 0
        self._idle = threading.Condition()
        self.connections: ConnectionSlots | None = None  # set by the Server
        self.deadlines: Deadlines | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def load(self) -> None:
        """Load the export and start the predictor threads; readiness follows."""
        try:
            loaded = self.repo.load_initial()
            # Every request names its model's functions; the batcher holds none of its own, so
            # a swapped-out model is freed once its last request is answered.
            self.batcher = MicroBatcher([_no_model] * len(loaded.engine.predict_fns),
                                        self.cfg.max_batch_rows, self.cfg.batch_wait_ms / 1000,
                                        self.cfg.max_queue_rows)
        except Exception as exc:
            self.failed = f"cannot load {self.model_dir}: {exc}"
            raise
        self.ready.set()

    @property
    def model(self) -> protocol.Model | None:
        """The request spec of the model being served now."""
        current = self.repo.current
        return current.spec if current else None

    @property
    def engine(self) -> str:
        current = self.repo.current
        return current.engine.name if current else ""

    @property
    def engine_note(self) -> str:
        """Why this engine: its check against the export's probe."""
        current = self.repo.current
        return current.engine.note if current else ""

    def begin(self) -> None:
        with self._idle:
            self._inflight += 1

    def end(self) -> None:
        with self._idle:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """True when no request is in flight (within the timeout)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight == 0, timeout_s)

    @property
    def inflight(self) -> int:
        return self._inflight

    # --- routing ---------------------------------------------------------------------------

    def handle(self, method: str, path: str, content_type: str, body: bytes) -> Reply:
        route = routes.match(path)
        if route is None:
            return json_reply(404, {"error": f"no such path {path} (POST {INFERENCE_PATH}, "
                                             "/<name>/prediction or /predict)"})
        if method not in route.methods:
            reply = json_reply(405, {"error": f"{path} takes {' or '.join(route.methods)}"})
            reply.allow = ", ".join(route.methods)
            return reply
        endpoint = route.endpoint
        if endpoint == "healthz":
            return self.health()
        if endpoint == "livez":
            return json_reply(200, {"status": "alive"})
        if endpoint == "metrics":
            return Reply(200, self.render_metrics().encode(),
                         "text/plain; version=0.0.4; charset=utf-8")
        if endpoint == "openapi":
            return json_reply(200, routes.document())
        current = self.repo.current
        if not self.ready.is_set() or current is None or self.batcher is None:
            return self.error(endpoint, 503, "model not loaded yet", body)
        if endpoint == "load":
            return self.reload(path.split("/")[-2], current)
        # One model for the whole request: parsed, predicted and tagged with one version.
        reply = self.predict_reply(endpoint, current, content_type, body, f"{method} {path}")
        reply.version = current.version
        return reply

    def reload(self, name: str, current: LoadedModel) -> Reply:
        """POST /v2/repository/models/<name>/load: swap in the export now in model_dir."""
        if name != current.name:
            return json_reply(404, {"error": f"no model {name!r} (this server has "
                                             f"{current.name!r})"})
        try:
            result = self.repo.reload("load request")
        except LoadRefused as exc:
            return json_reply(409, {"error": f"refused, still serving version "
                                             f"{current.version}: {exc}"})
        return json_reply(200, {"name": current.name, "version": result.version,
                                "swapped": result.swapped, "message": result.message})

    def predict_reply(self, endpoint: str, current: LoadedModel, content_type: str,
                      body: bytes, what: str) -> Reply:
        model, fns = current.spec, current.engine.predict_fns
        try:
            if endpoint == "inference":
                req = protocol.parse_inference(model, body)
                probs = self.predict(req.dense, req.sparse, fns)
                return json_reply(200, protocol.inference_reply(req, probs), len(probs))
            if endpoint == "prediction":
                preq = protocol.parse_prediction(model, body)
                probs = self.predict(preq.dense, preq.sparse, fns)
                return json_reply(200, protocol.prediction_reply(preq, probs), len(probs))
            is_json = "json" in content_type or (not content_type and body[:1] in (b"[", b"{"))
            rows = protocol.prepare_raw(model, body, is_json)
            if len(rows.lines) >= self.cfg.max_batch_rows:
                dense, sparse = protocol.parse_alone(rows)
            else:
                dense, sparse = self.parser.submit(rows, len(rows.lines),
                                                   self.cfg.request_timeout_s)
            probs = self.predict(dense, sparse, fns)
            return json_reply(200, {"predictions": probs}, len(probs))
        except BadRequest as exc:
            return self.error(endpoint, exc.status, exc.reason, body)
        except (Overloaded, TimedOut) as exc:
            return self.error(endpoint, 503, str(exc), body)
        except Exception as exc:  # a bug or a predictor failure: 500, and keep serving
            log.exception("%s failed", what)
            return self.error(endpoint, 500, f"internal error: {type(exc).__name__}: {exc}",
                              body)

    def predict(self, dense: np.ndarray, sparse: np.ndarray,
                fns: Sequence[PredictFn] | None = None) -> np.ndarray:
        assert self.batcher is not None
        return self.batcher.predict(dense, sparse, self.cfg.request_timeout_s, fns)

    def error(self, endpoint: str, status: int, reason: str, body: bytes | None = None) -> Reply:
        reason = " ".join(reason.split())  # always one line
        if endpoint == "inference":
            return json_reply(status, protocol.inference_error(reason, status, body))
        return json_reply(status, {"error": reason})

    def health(self) -> Reply:
        if self.draining:
            return json_reply(503, {"status": "draining"})
        if self.failed:
            return json_reply(503, {"status": "failed", "error": self.failed})
        if not self.ready.is_set():
            return json_reply(503, {"status": "loading"})
        return json_reply(200, {"status": "ready", "model_dir": str(self.model_dir),
                                "engine": self.engine, "engine_note": self.engine_note,
                                **self.repo.status()})

    def render_metrics(self) -> str:
        gauges = {
            "ready": ("1 when the model is loaded and the server is not draining.",
                      float(self.ready.is_set() and not self.draining)),
            "inflight_requests": ("Requests being handled now.", float(self._inflight)),
            "queued_rows": ("Rows waiting for the predictor.",
                            float(self.batcher.queued_rows if self.batcher else 0)),
        }
        counters: dict[str, tuple[str, float]] = {}
        if self.batcher is not None:
            s = self.batcher.stats
            with s.lock:
                counters = {
                    "predictor_batches_total": ("Predictor calls (micro-batches).", s.batches),
                    "predictor_rows_total": ("Rows through the predictor.", s.rows),
                    "predictor_seconds_total": ("Seconds spent in predictor calls.", s.seconds),
                }
        if self.connections is not None:
            gauges["open_connections"] = ("Client connections open now.",
                                          float(self.connections.open))
            counters["rejected_connections_total"] = (
                "Connections refused with 503 at serving.max_connections.",
                float(self.connections.rejected))
        if self.deadlines is not None:
            counters["read_timeouts_total"] = (
                "Requests cut off after serving.read_timeout_s (408).",
                float(self.deadlines.expired_total))
        text = self.metrics.render(gauges, counters)
        return text + "\n".join(self.repo.metric_lines(PREFIX)) + "\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "recrun-serve"
    sys_version = ""
    app: ServingApp  # set on the subclass made per server

    def setup(self) -> None:
        super().setup()
        # One write per reply plus no Nagle: no 40 ms delayed-ACK stalls on keep-alive.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # per-request lines would cost more than the request; /metrics has the counts

    expired = False  # set by the Deadlines thread when the request came too slowly

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
            self._write(self.app.error("other", code, reason))

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

    def _serve(self, read_body: bool) -> None:
        app = self.app
        app.begin()
        t0 = time.perf_counter()
        path = self.path.split("?", 1)[0]
        endpoint = endpoint_of(path)
        try:
            if not read_body and (self.headers.get("Content-Length", "0").strip() != "0"
                                  or "Transfer-Encoding" in self.headers):
                self.close_connection = True  # an unread body would be read as a request
            reply = self._reply(app, path, endpoint, read_body)
            if reply is None:  # the client went away
                self.close_connection = True
                return
            if app.draining:
                self.close_connection = True
            # Counted before the reply goes out: a client that reads /metrics next sees it.
            app.metrics.observe(endpoint, reply.status, time.perf_counter() - t0, reply.rows)
            self._write(reply)
            if self._discard:
                self._linger(self._discard)
        except OSError:
            self.close_connection = True
        finally:
            app.end()

    _discard = 0

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

    def _reply(self, app: ServingApp, path: str, endpoint: str, read_body: bool) -> Reply | None:
        body = b""
        if read_body:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                self.close_connection = True
                return app.error(endpoint, 411, "send a Content-Length (chunked bodies are "
                                                "not accepted)")
            length_text = self.headers.get("Content-Length")
            if length_text is None:
                self.close_connection = True
                return app.error(endpoint, 411, "Content-Length required")
            try:
                length = int(length_text)
                if length < 0:
                    raise ValueError
            except ValueError:
                self.close_connection = True
                return app.error(endpoint, 400, f"bad Content-Length {length_text!r}")
            if length > app.cfg.max_body_bytes:
                self.close_connection = True  # the unread body would be parsed as a request
                self._discard = length
                return app.error(endpoint, 413, f"body of {length} bytes is over "
                                                f"serving.max_body_bytes={app.cfg.max_body_bytes}")
            try:
                body = self.rfile.read(length)
            except (TimeoutError, OSError):
                return None
            if app.deadlines is not None:
                app.deadlines.disarm(self)
            if len(body) != length:
                self.close_connection = True
                if self.expired:
                    return app.error(endpoint, 408, f"body not received within "
                                                    f"serving.read_timeout_s="
                                                    f"{app.cfg.read_timeout_s:g} ({len(body)} "
                                                    f"of {length} bytes)")
                return app.error(endpoint, 400, f"body ended after {len(body)} of the "
                                                f"{length} bytes of its Content-Length")
        if self.expired:  # its reading side is shut: no next request on this connection
            self.close_connection = True
            if not read_body:  # the head came late (and may be incomplete)
                return app.error(endpoint, 408, "request not received within serving."
                                                f"read_timeout_s={app.cfg.read_timeout_s:g}")
        content_type = self.headers.get("Content-Type", "").lower()
        return app.handle(self.command, path, content_type, body)

    def _write(self, reply: Reply) -> None:
        head = (f"HTTP/1.1 {reply.status} {self.responses.get(reply.status, ('',))[0]}\r\n"
                f"Content-Type: {reply.content_type}\r\n"
                f"Content-Length: {len(reply.body)}\r\n")
        if reply.version:
            head += f"{routes.VERSION_HEADER}: {reply.version}\r\n"
        if reply.allow:
            head += f"Allow: {reply.allow}\r\n"
        if self.close_connection:
            head += "Connection: close\r\n"
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


class Server:
    """A running server: `start()`, then `stop()` (graceful) from any thread."""

    def __init__(self, cfg: ServingConfig, model_dir: str | Path) -> None:
        self.cfg = cfg
        self.model_dir = Path(model_dir)
        if not (self.model_dir / META_FILE).is_file():
            raise RecrunnerError(f"{self.model_dir} is not a recrunner export (no {META_FILE}); "
                                 "train first, or set serving.model_dir / runner.output_dir")
        self.app = ServingApp(cfg, self.model_dir)
        self.httpd: HTTPServer | None = None
        self._threads: list[threading.Thread] = []
        self._stop_watching = threading.Event()
        self.load_error: BaseException | None = None

    @property
    def port(self) -> int:
        assert self.httpd is not None
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self.cfg.host if self.cfg.host not in ("0.0.0.0", "", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    def start(self, load_in_background: bool = True) -> None:
        handler = type("BoundHandler", (Handler,), {"app": self.app,
                                                    "timeout": self.cfg.socket_timeout_s})
        try:
            self.httpd = HTTPServer((self.cfg.host, self.cfg.port), handler)
        except OSError as exc:
            raise RecrunnerError(f"cannot listen on {self.cfg.host}:{self.cfg.port}: "
                                 f"{exc.strerror or exc} (set serving.port / serving.host)"
                                 ) from exc
        self.httpd.slots = self.app.connections = ConnectionSlots(self.cfg.max_connections)
        self.httpd.deadlines = self.app.deadlines = Deadlines()
        serve = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                 name="http-accept", daemon=True)
        serve.start()
        self._threads.append(serve)
        if load_in_background:
            loader = threading.Thread(target=self._load, name="model-load", daemon=True)
            loader.start()
            self._threads.append(loader)
        else:
            self.app.load()
        self._watch()

    def _watch(self) -> None:
        if self.cfg.watch_interval_s > 0:
            self._threads.append(self.app.repo.watch(self.cfg.watch_interval_s,
                                                     self._stop_watching))

    def _load(self) -> None:
        try:
            self.app.load()
        except BaseException as exc:
            self.load_error = exc
            log.error("%s", self.app.failed)

    def reload(self, reason: str) -> None:
        """Swap in the export now in the model directory (SIGHUP); refusals are logged."""
        with contextlib.suppress(LoadRefused):
            self.app.repo.reload(reason)

    def wait_ready(self, timeout_s: float) -> bool:
        return self.app.ready.wait(timeout_s)

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop accepting, let in-flight requests finish; True if all finished in time."""
        timeout_s = self.cfg.shutdown_timeout_s if timeout_s is None else timeout_s
        self.app.draining = True
        self._stop_watching.set()
        if self.app.deadlines is not None:
            self.app.deadlines.close()
        if self.httpd is not None:
            self.httpd.shutdown()  # the accept loop ends; connection threads go on
            self.httpd.server_close()
        idle = self.app.wait_idle(timeout_s)
        if self.app.batcher is not None:
            self.app.batcher.close()
        return idle
