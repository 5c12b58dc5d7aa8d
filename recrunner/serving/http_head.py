"""A request's head: the request line and the header fields (RFC 9112), for the HTTP transport.

Hand-written rather than the stdlib's `http.client.parse_headers`, which runs every head
through `email.parser`: 130 us a typical 7-field head against 7 here, 13% of the server's GIL
time at batch 1 (docs/performance.md). It keeps the stdlib's limits (a line of at most
MAX_LINE bytes, at most MAX_FIELDS fields: 431 beyond) and is stricter where a lax reading
lets a proxy and this server disagree about a request's length (request smuggling):
obsolete line folding, a field without a name or with space before its colon, and
Content-Length fields that disagree are 400s.
"""

from collections.abc import Iterator, Mapping
from io import BufferedIOBase

MAX_LINE = 65536  # the stdlib's (http.client._MAXLINE)
MAX_FIELDS = 100  # the stdlib's (http.client._MAXHEADERS)
_NO_SPACE = frozenset(" \t")


class HeadError(Exception):
    """A head the server answers with `status` and closes the connection after."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Headers(Mapping[str, str]):
    """Header fields by case-insensitive name. A name sent more than once holds its values
    joined by ", " (RFC 9110, 5.3), except Content-Length (one value, or a 400)."""

    def __init__(self, fields: dict[str, str]) -> None:
        self._fields = fields  # lower-case names

    def __getitem__(self, name: str) -> str:
        return self._fields[name.lower()]

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self._fields.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


def request_line(line: str) -> tuple[str, str, str, tuple[int, int]]:
    """(method, target, version, (major, minor)) of a request line without its CRLF."""
    words = line.split()
    if len(words) != 3:
        raise HeadError(400, f"bad request line {line[:100]!r}")
    method, target, version = words
    major, dot, minor = version.removeprefix("HTTP/").partition(".")
    if not (version.startswith("HTTP/") and dot and major.isdigit() and minor.isdigit()
            and len(major) <= 10 and len(minor) <= 10):
        raise HeadError(400, f"bad HTTP version {version[:40]!r}")
    number = (int(major), int(minor))
    if number >= (2, 0):
        raise HeadError(505, f"HTTP version {version[:40]} not supported (HTTP/1.1)")
    if target.startswith("//"):  # as the stdlib: clients read //x as a host (open redirects)
        target = "/" + target.lstrip("/")
    return method, target, version, number


def read_fields(rfile: BufferedIOBase) -> Headers:
    """The header fields up to the empty line that ends the head."""
    fields: dict[str, str] = {}
    for _ in range(MAX_FIELDS + 1):
        raw = rfile.readline(MAX_LINE + 1)
        if len(raw) > MAX_LINE:
            raise HeadError(431, f"a header line is over {MAX_LINE} bytes")
        if raw in (b"\r\n", b"\n", b""):
            return Headers(fields)
        line = raw.decode("iso-8859-1").rstrip("\r\n")
        if line[0] in _NO_SPACE:
            raise HeadError(400, "obsolete line folding in the header fields")
        name, colon, value = line.partition(":")
        if not colon or not name or name[-1] in _NO_SPACE:
            raise HeadError(400, f"bad header field {line[:100]!r}")
        key, value = name.lower(), value.strip(" \t")
        if key not in fields:
            fields[key] = value
        elif key == "content-length":
            if value != fields[key]:
                raise HeadError(400, "Content-Length fields that disagree")
        else:
            fields[key] += ", " + value
    raise HeadError(431, f"more than {MAX_FIELDS} header fields")
