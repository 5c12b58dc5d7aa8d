"""The gRPC transport: one server on `serving.grpc_port` for every gRPC service.

Services are registered by name (grpc's generic handlers) from each protocol's servicer:
`service` (the full name) and `methods()` -> {name: (fn(message, call) -> (reply, rows),
request class, reply class)}. The errors of the data plane become gRPC status codes with the
same one-line reason the HTTP endpoints give. A call that took a model (dataplane.take) names its
version in the trailing metadata `x-model-version`, as HTTP replies do in their X-Model-Version
header.

Bounds against hostile clients (`limits()`; each was checked by experiment with grpcio 1.67, see
docs/reliability.md): a message over serving.max_body_bytes (compressed or once decompressed)
gets RESOURCE_EXHAUSTED; a connection must send its HTTP/2 preface and SETTINGS within
serving.read_timeout_s and is closed once idle for serving.socket_timeout_s; at most
serving.max_connections connections (one more is closed at once); at most
serving.grpc_max_concurrent_rpcs calls in progress (one more: RESOURCE_EXHAUSTED), each holding
one thread of a pool of that size; and every connection goes away after
serving.grpc_max_connection_age_s, which is what ends a call whose message never completes
(the sync server reads a unary request on the call's thread, with no deadline of its own).
"""

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import grpc
from google.protobuf.message import DecodeError

from recrunner.config.serving import ServingConfig
from recrunner.errors import RecrunnerError
from recrunner.serving.dataplane import Call, error_status
from recrunner.serving.protocol import BadRequest
from recrunner.serving.routes import VERSION_HEADER

log = logging.getLogger(__name__)

# HTTP status of a data-plane error -> gRPC code.
CODES = {400: grpc.StatusCode.INVALID_ARGUMENT, 404: grpc.StatusCode.NOT_FOUND,
         413: grpc.StatusCode.RESOURCE_EXHAUSTED, 503: grpc.StatusCode.UNAVAILABLE}
VERSION_KEY = VERSION_HEADER.lower()  # gRPC metadata keys are lower case


class Servicer(Protocol):
    service: str

    def methods(self) -> dict[str, tuple[Any, Any, Any]]: ...


# (endpoint, status code value, seconds, rows) after each call; begin/end around it.
Observe = Callable[[str, int, float, int], None]


def _ms(seconds: float) -> int:
    return min(round(seconds * 1000), 2**31 - 1)  # grpc's channel args are 32-bit ints


def limits(cfg: ServingConfig) -> list[tuple[str, Any]]:
    """grpc channel args from the serving config (see the module's docstring)."""
    return [("grpc.max_receive_message_length", cfg.max_body_bytes),
            ("grpc.max_send_message_length", cfg.max_body_bytes),
            ("grpc.so_reuseport", 0),
            ("grpc.server_handshake_timeout_ms", _ms(cfg.read_timeout_s)),
            ("grpc.max_connection_idle_ms", _ms(cfg.socket_timeout_s)),
            ("grpc.max_allowed_incoming_connections", cfg.max_connections),
            ("grpc.max_connection_age_ms", _ms(cfg.grpc_max_connection_age_s)),
            # a call in progress at the GOAWAY: time to finish sending and to be answered
            ("grpc.max_connection_age_grace_ms",
             _ms(cfg.read_timeout_s + cfg.request_timeout_s))]


class GrpcServer:
    def __init__(self, cfg: ServingConfig, servicers: list[Servicer], observe: Observe,
                 begin: Callable[[], None], end: Callable[[], None]) -> None:
        self.cfg = cfg
        self._observe, self._begin, self._end = observe, begin, end
        # A thread per call in progress (each blocks on the batcher); one call more is refused
        # rather than queued behind calls that may never complete.
        rpcs = cfg.grpc_max_concurrent_rpcs
        self.server = grpc.server(ThreadPoolExecutor(max_workers=rpcs, thread_name_prefix="grpc"),
                                  options=limits(cfg), maximum_concurrent_rpcs=rpcs)
        for servicer in servicers:
            # Requests arrive as bytes and are parsed in _wrap: a malformed message is the
            # client's error (INVALID_ARGUMENT), not grpc's INTERNAL.
            handlers = {name: grpc.unary_unary_rpc_method_handler(
                self._wrap(servicer.service, name, fn, req),
                response_serializer=resp.SerializeToString)
                for name, (fn, req, resp) in servicer.methods().items()}
            self.server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(servicer.service, handlers),))
        self.port = 0

    def _wrap(self, service: str, name: str, fn: Callable[[Any, Call], tuple[Any, int]],
              request_class: Any) -> Callable[[bytes, grpc.ServicerContext], Any]:
        endpoint = f"grpc_{service.rsplit('.', 1)[-1]}_{name}"

        def call(data: bytes, context: grpc.ServicerContext) -> Any:
            self._begin()
            t0 = time.perf_counter()
            code, rows = grpc.StatusCode.OK, 0
            call = Call()
            try:
                try:
                    try:
                        msg = request_class.FromString(data)
                    except DecodeError as exc:
                        raise BadRequest(f"invalid protobuf {request_class.__name__}: "
                                         f"{exc}") from exc
                    reply, rows = fn(msg, call)
                    if call.model is not None:
                        context.set_trailing_metadata(((VERSION_KEY, call.model.version),))
                    return reply
                except Exception as exc:
                    known = error_status(exc)
                    if known is None:  # a bug or a predictor failure: INTERNAL, keep serving
                        log.exception("gRPC %s/%s failed", service, name)
                        code, reason = (grpc.StatusCode.INTERNAL,
                                        f"internal error: {type(exc).__name__}: {exc}")
                    else:
                        status, reason = known
                        code = CODES.get(status, grpc.StatusCode.INVALID_ARGUMENT)
                    if call.model is not None:  # sent with the abort's status
                        context.set_trailing_metadata(((VERSION_KEY, call.model.version),))
            finally:
                self._observe(endpoint, code.value[0], time.perf_counter() - t0, rows)
                self._end()
            context.abort(code, " ".join(reason.split()))  # raises; always one line

        return call

    def start(self, host: str, port: int) -> int:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = self.server.add_insecure_port(address)
        except RuntimeError as exc:
            bound, detail = 0, str(exc)
        else:
            detail = "address in use or not available"
        if not bound:
            raise RecrunnerError(f"cannot listen for gRPC on {address}: {detail} (set "
                                 "serving.grpc_port)")
        self.server.start()
        self.port = bound
        return bound

    def stop(self, grace_s: float) -> None:
        self.server.stop(grace_s).wait(grace_s + 1)
