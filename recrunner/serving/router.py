"""HTTP requests and replies independent of the HTTP server, and the router: each protocol's
endpoints module binds a handler (and the protocol's error wording) to the endpoint keys of
the one route table, routes.ROUTES, which also generates GET /openapi.json."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from recrunner.serving import protocol, routes
from recrunner.serving.dataplane import Call

JSON = "application/json"


@dataclass
class Request:
    method: str
    path: str  # without the query string
    headers: Mapping[str, str]  # case-insensitive (an email.message.Message) or lower-case keys
    body: bytes = b""
    call: Call = field(default_factory=Call)  # the model this request took (dataplane.take)

    @property
    def content_type(self) -> str:
        return (self.headers.get("Content-Type") or "").lower()


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = JSON
    rows: int = 0
    headers: dict[str, str] = field(default_factory=dict)


def json_reply(status: int, obj: Any, rows: int = 0) -> Reply:
    return Reply(status, protocol.dumps(obj), JSON, rows)


def error_reply(request: Request | None, status: int, reason: str) -> Reply:
    return json_reply(status, {"error": reason})


Handler = Callable[[Request, dict[str, str]], Reply]
# How a protocol words an error: (request or None, status, one-line reason) -> reply.
ErrorFn = Callable[[Request | None, int, str], Reply]


@dataclass
class Bound:
    route: routes.Route
    params: dict[str, str]
    handler: Handler
    on_error: ErrorFn


class Router:
    def __init__(self) -> None:
        self._handlers: dict[str, tuple[Handler, ErrorFn]] = {}

    def bind(self, endpoint: str, handler: Handler, on_error: ErrorFn = error_reply) -> None:
        """Serve the routes of routes.ROUTES whose endpoint key is `endpoint` with `handler`."""
        if not any(r.endpoint == endpoint for r in routes.ROUTES):
            raise KeyError(f"endpoint {endpoint!r} has no row in routes.ROUTES")
        self._handlers[endpoint] = (handler, on_error)

    def check(self) -> None:
        """Every route of the table has a handler (else it would be published, not served)."""
        unbound = sorted({r.endpoint for r in routes.ROUTES} - set(self._handlers))
        if unbound:
            raise KeyError(f"routes without a handler: {', '.join(unbound)}")

    def find(self, path: str) -> Bound | None:
        """The route of `path` (whatever the method) with its handler and path parameters."""
        route, params = routes.match(path)
        if route is None:
            return None
        handler, on_error = self._handlers[route.endpoint]
        return Bound(route, params, handler, on_error)

    def on_error(self, path: str) -> tuple[str, ErrorFn]:
        """The endpoint and error wording for `path` whatever the method (transport errors
        come before the method is looked at)."""
        bound = self.find(path)
        return (bound.route.endpoint, bound.on_error) if bound else ("other", error_reply)
