"""The gRPC transport: one server on `serving.grpc_port` for every gRPC service.

Services are registered by name (grpc's generic handlers) from each protocol's servicer:
`service` (the full name) and `methods()` -> {name: (fn(message, call) -> (reply, rows),
request class, reply class)}. The errors of the data plane become gRPC status codes with the
same one-line reason the HTTP endpoints give; message size is limited by serving.max_body_bytes,
as HTTP bodies are. A call that took a model (dataplane.take) names its version in the trailing
metadata `x-model-version`, as HTTP replies do in their X-Model-Version header.

It is a grpc.aio server on an event loop of its own thread. grpcio's sync server hands every
call from its polling thread to a pool thread (≈ 0.2–0.3 ms of GIL time a call on this
machine's Zen 1, and a p99 ≈ 3× HTTP's at batch 1 × 8 clients). Here a small call runs its
synchronous data plane (parse, batcher, engine) on the loop itself, no hand-off: the GIL
serialises that Python work anyway, and a batch-1 prediction is ≈ 0.1 ms. A large message, or
one that arrives while large ones are running, goes to a pool thread instead: its parse and
prediction would stall the loop for milliseconds, and running beside others lets the
batcher merge it with them.
"""

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

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
# Messages up to this size run on the loop (a batch-1 tensor request is < 1 KB; 16 rows ≈ 4 KB).
INLINE_BYTES = int(os.environ.get("RECRUNNER_GRPC_INLINE_BYTES", 4096))
MODE = os.environ.get("RECRUNNER_GRPC_MODE", "auto")

T = TypeVar("T")


class Servicer(Protocol):
    service: str

    def methods(self) -> dict[str, tuple[Any, Any, Any]]: ...


# (endpoint, status code value, seconds, rows) after each call; begin/end around it.
Observe = Callable[[str, int, float, int], None]
Method = Callable[[Any, Call], tuple[Any, int]]


class GrpcServer:
    def __init__(self, cfg: ServingConfig, servicers: list[Servicer], observe: Observe,
                 begin: Callable[[], None], end: Callable[[], None]) -> None:
        self.cfg = cfg
        self._observe, self._begin, self._end = observe, begin, end
        # Calls that block on the batcher while others are served: one thread each.
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="grpc")
        self._pooled = 0  # calls in the pool now (read and written on the loop only)
        if os.environ.get("RECRUNNER_GRPC_UVLOOP"):
            import uvloop
            self._loop = uvloop.new_event_loop()
        else:
            self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="grpc-loop",
                                        daemon=True)
        self._thread.start()
        self.server: grpc.aio.Server = self._run(self._create(servicers))
        self.port = 0

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run `coro` on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    async def _create(self, servicers: list[Servicer]) -> grpc.aio.Server:
        # grpc.aio binds a server to the loop running when it is made: this one.
        options = [("grpc.max_receive_message_length", self.cfg.max_body_bytes),
                   ("grpc.max_send_message_length", self.cfg.max_body_bytes),
                   ("grpc.so_reuseport", 0)]
        server = grpc.aio.server(options=options)
        for servicer in servicers:
            # Requests arrive as bytes and are parsed in _wrap: a malformed message is the
            # client's error (INVALID_ARGUMENT), not grpc's INTERNAL.
            handlers = {name: grpc.unary_unary_rpc_method_handler(
                self._wrap(servicer.service, name, fn, req),
                response_serializer=resp.SerializeToString)
                for name, (fn, req, resp) in servicer.methods().items()}
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(servicer.service, handlers),))
        return server

    def _wrap(self, service: str, name: str, fn: Method, request_class: Any
              ) -> Callable[[bytes, grpc.aio.ServicerContext], Coroutine[Any, Any, Any]]:
        endpoint = f"grpc_{service.rsplit('.', 1)[-1]}_{name}"

        def run(data: bytes, call: Call) -> tuple[Any, int]:
            try:
                msg = request_class.FromString(data)
            except DecodeError as exc:
                raise BadRequest(f"invalid protobuf {request_class.__name__}: {exc}") from exc
            return fn(msg, call)

        async def handle(data: bytes, context: grpc.aio.ServicerContext) -> Any:
            self._begin()
            t0 = time.perf_counter()
            code, rows = grpc.StatusCode.OK, 0
            call = Call()
            try:
                try:
                    if MODE == "direct" or (MODE == "auto" and len(data) <= INLINE_BYTES
                                            and not self._pooled):
                        reply, rows = run(data, call)
                    else:
                        self._pooled += 1
                        try:
                            reply, rows = await self._loop.run_in_executor(self._pool, run,
                                                                           data, call)
                        finally:
                            self._pooled -= 1
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
            await context.abort(code, " ".join(reason.split()))  # raises; always one line

        return handle

    def start(self, host: str, port: int) -> int:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

        async def bind() -> int:
            bound = self.server.add_insecure_port(address)
            if bound:
                await self.server.start()
            return bound

        try:
            bound = self._run(bind())
        except RuntimeError as exc:
            bound, detail = 0, str(exc)
        else:
            detail = "address in use or not available"
        if not bound:
            self._close()
            raise RecrunnerError(f"cannot listen for gRPC on {address}: {detail} (set "
                                 "serving.grpc_port)")
        self.port = bound
        return bound

    def stop(self, grace_s: float) -> None:
        """Refuse new calls, let running ones finish within `grace_s`, then end the loop."""
        try:
            self._run(self.server.stop(grace_s), grace_s + 1)
        except TimeoutError:
            log.warning("gRPC server did not stop within %.1f s", grace_s + 1)
        self._close()

    def _close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()
        self._pool.shutdown(wait=False)
