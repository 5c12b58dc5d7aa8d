"""recrunner.serving.http_head: the request head as the HTTP transport reads it."""

import io

import pytest

from recrunner.serving.http_head import (
    MAX_FIELDS,
    MAX_LINE,
    HeadError,
    read_fields,
    request_line,
)


def fields(head: bytes) -> dict[str, str]:
    return dict(read_fields(io.BytesIO(head)))


def test_fields_by_any_case_and_the_body_left_unread() -> None:
    stream = io.BytesIO(b"Host: x\r\ncontent-TYPE:  text/plain \r\nContent-Length: 4\r\n\r\nbody")
    headers = read_fields(stream)
    assert headers.get("Content-Type") == "text/plain" == headers["CONTENT-TYPE"]
    assert "content-length" in headers and "Transfer-Encoding" not in headers
    assert headers.get("Accept-Encoding", "") == "" and headers.get("X") is None
    assert stream.read() == b"body"


def test_repeated_fields_are_joined_and_equal_lengths_kept_once() -> None:
    assert fields(b"Accept-Encoding: gzip\r\naccept-encoding: br\r\nContent-Length: 5\r\n"
                  b"Content-Length: 5\r\n\n") == {"accept-encoding": "gzip, br",
                                                  "content-length": "5"}


@pytest.mark.parametrize("head,status,words", [
    (b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n", 400, "Content-Length fields"),
    (b"X-A: 1\r\n folded\r\n\r\n", 400, "obsolete line folding"),
    (b"X-A : 1\r\n\r\n", 400, "bad header field 'X-A : 1'"),
    (b"no colon\r\n\r\n", 400, "bad header field 'no colon'"),
    (b": empty name\r\n\r\n", 400, "bad header field"),
    (b"X-A: " + b"a" * MAX_LINE + b"\r\n\r\n", 431, f"over {MAX_LINE} bytes"),
    (b"X-A: 1\r\n" * (MAX_FIELDS + 1) + b"\r\n", 431, f"more than {MAX_FIELDS}"),
])
def test_bad_fields(head: bytes, status: int, words: str) -> None:
    with pytest.raises(HeadError, match=words) as err:
        fields(head)
    assert err.value.status == status


def test_the_most_fields_allowed_and_a_head_cut_short() -> None:
    assert len(fields(b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_FIELDS)) + b"\r\n")) == \
        MAX_FIELDS
    assert fields(b"X-A: 1\r\n") == {"x-a": "1"}  # the peer closed: what came is the head


def test_request_lines() -> None:
    assert request_line("POST /predict HTTP/1.1") == ("POST", "/predict", "HTTP/1.1", (1, 1))
    assert request_line("GET //evil.example/x HTTP/1.0") == \
        ("GET", "/evil.example/x", "HTTP/1.0", (1, 0))
    for line, status, words in (("GET / HTTP/2.0", 505, "not supported"),
                                ("GET / HTTP/1", 400, "bad HTTP version"),
                                ("GET / HTTP/1.x", 400, "bad HTTP version"),
                                ("GET / FTP/1.1", 400, "bad HTTP version"),
                                ("GET /", 400, "bad request line"),
                                ("GET / x HTTP/1.1", 400, "bad request line")):
        with pytest.raises(HeadError, match=words) as err:
            request_line(line)
        assert err.value.status == status, line
