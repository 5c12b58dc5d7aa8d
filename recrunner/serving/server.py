"""`recrun serve`: the server, assembled as KServe's model server is.

- transports: HTTP (http_server.py) on serving.port and one gRPC server (grpc_server.py) on
  serving.grpc_port for every gRPC service;
- the data plane (dataplane.py): the current model, checked arrays -> probabilities through
  the micro-batcher; no protocol in it;
- one endpoints class per protocol, bound on the router (router.py) to the rows of the one
  route table (routes.py, which also generates GET /openapi.json): Paddle Serving
  (paddle_serving.py), the Open Inference Protocol (open_inference.py), raw rows
  (raw_rows.py), and the operational ones below (/healthz, /livez, /metrics, /openapi.json,
  POST /v2/repository/models/<name>/load);
- the model repository (repository.py): the model being served, new exports swapped in by
  the directory watcher, the load endpoint or SIGHUP; every request takes the model once
  (dataplane.take) and its reply names the version (X-Model-Version, gRPC trailing metadata);
- limits (limits.py): bounded connections and read deadlines on the HTTP transport.
"""

import contextlib
import logging
import threading
import time
from pathlib import Path

from recrunner.config.serving import ServingConfig
from recrunner.errors import RecrunnerError
from recrunner.export import META_FILE
from recrunner.serving import protocol, routes
from recrunner.serving.batcher import MicroBatcher
from recrunner.serving.dataplane import DataPlane, error_status
from recrunner.serving.grpc_server import GrpcServer, Servicer
from recrunner.serving.http_server import Handler, HTTPServer
from recrunner.serving.limits import ConnectionSlots, Deadlines
from recrunner.serving.metrics import PREFIX, Metrics
from recrunner.serving.open_inference import InferenceServicer, OpenInferenceEndpoints
from recrunner.serving.paddle_serving import (
    INFERENCE_PATH,
    GeneralModelServicer,
    PaddleServingEndpoints,
)
from recrunner.serving.raw_rows import RawRowsEndpoints
from recrunner.serving.repository import LoadRefused, ModelRepository
from recrunner.serving.router import Reply, Request, Router, json_reply

log = logging.getLogger(__name__)
__all__ = ["INFERENCE_PATH", "Server", "ServingApp"]


class ServingApp:
    """The HTTP endpoints, independent of the HTTP server: Request -> (endpoint, Reply)."""

    def __init__(self, cfg: ServingConfig, model_dir: Path) -> None:
        self.cfg = cfg
        self.model_dir = model_dir
        self.plane = DataPlane(cfg, model_dir)
        self.metrics = Metrics()
        self.router = Router()
        self.router.bind("healthz", lambda r, p: self.health())
        self.router.bind("livez", lambda r, p: json_reply(200, {"status": "alive"}))
        self.router.bind("metrics", lambda r, p: Reply(
            200, self.render_metrics().encode(), "text/plain; version=0.0.4; charset=utf-8"))
        self.router.bind("openapi", lambda r, p: json_reply(200, routes.document()))
        self.router.bind("load", lambda r, p: self.reload(p["name"]))
        for endpoints in (PaddleServingEndpoints(self.plane), RawRowsEndpoints(self.plane),
                          OpenInferenceEndpoints(self.plane)):
            endpoints.register(self.router)
        self.router.check()
        self.servicers: list[Servicer] = [GeneralModelServicer(self.plane),
                                          InferenceServicer(self.plane)]
        self._inflight = 0
        self._idle = threading.Condition()
        self.connections: ConnectionSlots | None = None  # set by the Server
        self.deadlines: Deadlines | None = None

    # --- what the model is (through the data plane) -----------------------------------------

    @property
    def draining(self) -> bool:
        return self.plane.draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self.plane.draining = value

    @property
    def ready(self) -> threading.Event:
        return self.plane.ready

    @property
    def failed(self) -> str | None:
        return self.plane.failed

    @property
    def repo(self) -> ModelRepository:
        return self.plane.repo

    @property
    def model(self) -> protocol.Model | None:
        """The request spec of the model being served now."""
        loaded = self.plane.loaded
        return loaded.spec if loaded else None

    @property
    def batcher(self) -> MicroBatcher | None:
        return self.plane.batcher

    def load(self) -> None:
        self.plane.load()

    # --- in-flight requests (both transports) ------------------------------------------------

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

    # --- routing -----------------------------------------------------------------------------

    def handle(self, request: Request) -> tuple[str, Reply]:
        bound = self.router.find(request.path)
        if bound is None:
            return "other", json_reply(404, {"error": f"no such path {request.path} (POST "
                                                      f"{INFERENCE_PATH}, /<name>/prediction, "
                                                      "/predict, /v2/models/<name>/infer; GET "
                                                      "/openapi.json lists them)"})
        route = bound.route
        if request.method not in route.methods:
            reply = json_reply(405, {"error": f"{request.path} takes "
                                              f"{' or '.join(route.methods)}"})
            reply.headers["Allow"] = ", ".join(route.methods)
            return route.endpoint, reply
        try:
            reply = bound.handler(request, bound.params)
        except Exception as exc:
            known = error_status(exc)
            if known is None:  # a bug or a predictor failure: 500, and keep serving
                log.exception("%s %s failed", request.method, request.path)
                known = (500, f"internal error: {type(exc).__name__}: {exc}")
            status, reason = known
            reply = bound.on_error(request, status, " ".join(reason.split()))
        model = request.call.model
        if model is not None:  # the one version that computed this reply
            reply.headers[routes.VERSION_HEADER] = model.version
        return route.endpoint, reply

    def reload(self, name: str) -> Reply:
        """POST /v2/repository/models/<name>/load: swap in the export now in model_dir."""
        current = self.plane.loaded
        if current is None or not self.ready.is_set():
            return json_reply(503, {"error": "model not loaded yet"})
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

    def error(self, request: Request, status: int, reason: str) -> tuple[str, Reply]:
        """A transport error (length, size, encoding) in the wording of the path's protocol."""
        endpoint, on_error = self.router.on_error(request.path)
        return endpoint, on_error(request, status, " ".join(reason.split()))

    def health(self) -> Reply:
        if self.draining:
            return json_reply(503, {"status": "draining"})
        if self.failed:
            return json_reply(503, {"status": "failed", "error": self.failed})
        loaded = self.plane.loaded
        if not self.ready.is_set() or loaded is None:
            return json_reply(503, {"status": "loading"})
        return json_reply(200, {"status": "ready", "model_dir": self.repo.source,
                                "model": loaded.name, "engine": loaded.engine.name,
                                "engine_note": loaded.engine.note, **self.repo.status()})

    def render_metrics(self) -> str:
        batcher = self.batcher
        gauges = {
            "ready": ("1 when the model is loaded and the server is not draining.",
                      float(self.ready.is_set() and not self.draining)),
            "inflight_requests": ("Requests being handled now.", float(self._inflight)),
            "queued_rows": ("Rows waiting for the predictor.",
                            float(batcher.queued_rows if batcher else 0)),
        }
        counters: dict[str, tuple[str, float]] = {}
        if batcher is not None:
            s = batcher.stats
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


class Server:
    """A running server: `start()`, then `stop()` (graceful) from any thread."""

    def __init__(self, cfg: ServingConfig, model_dir: str | Path) -> None:
        self.cfg = cfg
        self.model_dir = Path(model_dir)
        if cfg.sparse.store == "memory" and not (self.model_dir / META_FILE).is_file():
            raise RecrunnerError(f"{self.model_dir} is not a recrunner export (no {META_FILE}); "
                                 "train first, or set serving.model_dir / runner.output_dir")
        self.app = ServingApp(cfg, self.model_dir)
        self.httpd: HTTPServer | None = None
        self.grpc: GrpcServer | None = None
        self._threads: list[threading.Thread] = []
        self._stop_watching = threading.Event()
        self.load_error: BaseException | None = None

    @property
    def port(self) -> int:
        assert self.httpd is not None
        return int(self.httpd.server_address[1])

    @property
    def grpc_port(self) -> int:
        assert self.grpc is not None
        return self.grpc.port

    @property
    def host(self) -> str:
        return self.cfg.host if self.cfg.host not in ("0.0.0.0", "", "::") else "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def grpc_target(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    def start(self, load_in_background: bool = True) -> None:
        if self.cfg.sparse.store == "memory":
            from recrunner.runtime import import_paddle

            # Here, not in the loading thread: Paddle's import turns dygraph mode on for the
            # importing thread only, and an embedding process's main thread would be left in
            # static mode (its own dygraph code then fails).
            import_paddle(self.cfg.threads)
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
        grpc_port = self.cfg.grpc_port
        if grpc_port is None:
            grpc_port = self.cfg.port + 1 if self.cfg.port else 0
        self.grpc = GrpcServer(self.cfg, self.app.servicers, self.app.metrics.observe,
                               self.app.begin, self.app.end)
        try:
            self.grpc.start(self.cfg.host, grpc_port)
        except RecrunnerError:
            self.httpd.server_close()
            self.app.deadlines.close()
            raise
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
        t0 = time.monotonic()
        if self.grpc is not None:
            self.grpc.stop(timeout_s)  # refuses new calls, waits for running ones
        idle = self.app.wait_idle(max(0.0, timeout_s - (time.monotonic() - t0)))
        self.app.plane.close()
        return idle
