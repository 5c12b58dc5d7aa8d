"""The gRPC transport: one server on `serving.grpc_port` for every gRPC service.

Services are registered by name (grpc's generic handlers) from each protocol's servicer:
`service` (the full name) and `methods()` -> {name: (fn(message, call) -> (reply, rows),
request class, reply class)}. The errors of the data plane become gRPC status codes with the
same one-line reason the HTTP endpoints give; message size is limited by serving.max_body_bytes,
as HTTP bodies are. A call that took a model (dataplane.take) names its version in the trailing
metadata `x-model-version`, as HTTP replies do in their X-Model-Version header.
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


class GrpcServer:
    def __init__(self, cfg: ServingConfig, servicers: list[Servicer], observe: Observe,
                 begin: Callable[[], None], end: Callable[[], None]) -> None:
        self.cfg = cfg
        self._observe, self._begin, self._end = observe, begin, end
        options = [("grpc.max_receive_message_length", cfg.max_body_bytes),
                   ("grpc.max_send_message_length", cfg.max_body_bytes),
                   ("grpc.so_reuseport", 0)]
        # Enough threads for many concurrent clients: each call blocks on the batcher.
        self.server = grpc.server(ThreadPoolExecutor(max_workers=32, thread_name_prefix="grpc"),
                                  options=options)
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
