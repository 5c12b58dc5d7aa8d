"""HTTP requests and replies independent of the HTTP server, and the route table that the
endpoints of each protocol register on (method, path pattern) -> handler."""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from recrunner.serving import protocol

JSON = "application/json"


@dataclass
class Request:
    method: str
    path: str  # without the query string
    headers: Mapping[str, str]  # case-insensitive (an email.message.Message) or lower-case keys
    body: bytes = b""

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
class Route:
    method: str
    pattern: re.Pattern[str]
    endpoint: str  # the metrics label
    handler: Handler
    on_error: ErrorFn


class Router:
    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, method: str, pattern: str, endpoint: str, handler: Handler,
            on_error: ErrorFn = error_reply) -> None:
        """`pattern`: a regular expression over the whole path; named groups are passed to
        the handler."""
        self.routes.append(Route(method, re.compile(pattern), endpoint, handler, on_error))

    def find(self, method: str, path: str) -> tuple[Route | None, dict[str, str], list[str]]:
        """(the route, its path parameters, []) or (None, {}, the methods the path takes)."""
        methods: list[str] = []
        for route in self.routes:
            m = route.pattern.fullmatch(path)
            if m is None:
                continue
            if route.method == method:
                return route, m.groupdict(), []
            methods.append(route.method)
        return None, {}, methods

    def on_error(self, path: str) -> tuple[str, ErrorFn]:
        """The endpoint and error wording for `path` whatever the method (transport errors
        come before the method is looked at)."""
        for route in self.routes:
            if route.pattern.fullmatch(path):
                return route.endpoint, route.on_error
        return "other", error_reply
