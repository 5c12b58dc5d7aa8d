"""Bounds that keep slow and greedy clients from holding the server.

The transport is a thread per connection (request threads parse and wait on the micro-batcher,
so they need to block), which is cheap for hundreds of connections but must not grow without
bound, and a socket timeout alone does not stop a slow sender: it applies to each `recv`, so a
client sending a byte a second keeps a thread forever. Hence:

- `ConnectionSlots`: at most `serving.max_connections` connections are served at once; one more
  is answered `503` and closed straight from the accept loop, without a thread.
- `Deadlines`: once the first byte of a request arrives, its head and body must arrive within
  `serving.read_timeout_s`; one thread shuts the reading side of late sockets, which wakes the
  blocked read, and the request is answered `408` and its connection closed.
- Idle keep-alive connections wait at most `serving.socket_timeout_s` for the next request.
"""

import contextlib
import socket
import threading
import time
from typing import Any

_BUSY_BODY = b'{"error": "too many connections (serving.max_connections); retry"}'
BUSY_REPLY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
              b"Retry-After: 1\r\nConnection: close\r\n"
              + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode() + _BUSY_BODY)


LINGER_MAX = 1024  # refused sockets waiting to be closed


class ConnectionSlots:
    """A counter of open connections with a ceiling (taken in the accept loop, released by the
    connection's thread)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open = 0
        self.rejected = 0
        self._lock = threading.Lock()

    @property
    def open(self) -> int:
        return self._open

    def take(self) -> bool:
        with self._lock:
            if self._open >= self.limit:
                self.rejected += 1
                return False
            self._open += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._open -= 1


def refuse(sock: socket.socket, deadlines: "Deadlines") -> None:
    """Answer 503 without blocking the accept loop; the socket is closed a moment later, its
    unread request drained first, so the client reads the 503 rather than a reset."""
    try:
        sock.setblocking(False)
        sock.send(BUSY_REPLY)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        sock.close()
        return
    deadlines.linger(sock)


class Deadlines:
    """Sockets that must finish reading a request by a time; late ones have their reading side
    shut (the blocked read returns end-of-file) and are marked expired."""

    def __init__(self, tick_s: float = 0.1) -> None:
        self._due: dict[Any, tuple[float, socket.socket]] = {}
        self._lock = threading.Lock()
        self._tick_s = tick_s
        self._stop = threading.Event()
        self.expired_total = 0
        self._closing: list[tuple[float, socket.socket]] = []  # refused, closed when due
        self._thread = threading.Thread(target=self._run, name="read-deadlines", daemon=True)
        self._thread.start()

    def arm(self, owner: Any, sock: socket.socket, seconds: float) -> None:
        with self._lock:
            self._due[owner] = (time.monotonic() + seconds, sock)

    def disarm(self, owner: Any) -> None:
        with self._lock:
            self._due.pop(owner, None)

    def linger(self, sock: socket.socket, seconds: float = 0.5) -> None:
        """Close `sock` (non-blocking, reply sent) after `seconds`, reading what is left."""
        with self._lock:
            if len(self._closing) < LINGER_MAX:
                self._closing.append((time.monotonic() + seconds, sock))
                return
        sock.close()  # a flood of refused connections: no grace for these

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._tick_s):
            now = time.monotonic()
            with self._lock:
                late = [(o, s) for o, (t, s) in self._due.items() if t <= now]
                for owner, _ in late:
                    del self._due[owner]
                done = [s for t, s in self._closing if t <= now]
                self._closing = [(t, s) for t, s in self._closing if t > now]
            for sock in done:
                with contextlib.suppress(OSError):  # BlockingIOError: nothing left
                    for _ in range(16):
                        if not sock.recv(65536):
                            break
                sock.close()
            for owner, sock in late:
                owner.expired = True
                self.expired_total += 1
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RD)
