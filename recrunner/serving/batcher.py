"""Micro-batching in front of the predictor.

Request threads submit (dense, sparse) arrays and wait on a ticket; predictor threads take the
first queued chunk, add whatever else is queued (optionally waiting `wait_s` for more) up to
`max_rows`, run one predictor call and hand each ticket its slice. Large requests are split
into chunks of at most `max_rows`, so one big request cannot monopolise a call. Every wait is
bounded: the queue by `max_queue_rows` (503), the answer by the caller's timeout.

A request may name the model version's predict functions (`fns`, one per predictor thread): a
batch merges only chunks of one version, so every reply comes from exactly one model while a
new version is swapped in (recrunner.serving.repository).

Predictor slot i (its predict function, which may not be thread-safe: a paddle.inference
clone) is used only under lock i. A request that finds nothing queued and a slot free runs
its rows on that slot in its own thread: no queue, ticket or wake-up (profiled at batch 1 x 8
clients: ≈ 40% of the server's GIL time went to the hand-off, 13% to the ONNX Runtime call).
Requests that arrive while every slot is busy queue and are merged as before, so batching
still happens exactly when the predictor is the bottleneck.
"""

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

PredictFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


class Overloaded(Exception):
    """The queue is full: the client should retry later (HTTP 503)."""


class TimedOut(Exception):
    """No answer within the request timeout (HTTP 503)."""


class Ticket:
    """One request's rows, answered chunk by chunk."""

    __slots__ = ("out", "pending", "error", "done", "lock")

    def __init__(self, rows: int, chunks: int) -> None:
        self.out = np.empty(rows, np.float32)
        self.pending = chunks
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.lock = threading.Lock()

    def finish_chunk(self, error: BaseException | None = None) -> None:
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.pending -= 1
            last = self.pending == 0
        if last:
            self.done.set()


@dataclass
class Chunk:
    ticket: Ticket
    start: int
    dense: np.ndarray
    sparse: np.ndarray
    fns: Sequence[PredictFn] | None = None  # the model version; None: the batcher's own

    def __len__(self) -> int:
        return len(self.dense)


@dataclass
class BatchStats:
    """Counters read by /metrics (updated by predictor threads only, under the lock)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    batches: int = 0
    rows: int = 0
    seconds: float = 0.0


class MicroBatcher:
    def __init__(self, predict_fns: list[PredictFn], max_rows: int, wait_s: float,
                 max_queue_rows: int) -> None:
        if max_rows < 1:
            raise ValueError("serving.max_batch_rows must be at least 1")
        self.max_rows = max_rows
        self.wait_s = max(0.0, wait_s)
        self.max_queue_rows = max_queue_rows
        self.stats = BatchStats()
        self._queue: queue.SimpleQueue[Chunk | None] = queue.SimpleQueue()
        self._queued_rows = 0
        self._queued_lock = threading.Lock()
        self._own = list(predict_fns)
        self._slots = [threading.Lock() for _ in predict_fns]
        self._threads = [threading.Thread(target=self._work, args=(i, fn), daemon=True,
                                          name=f"predictor-{i}")
                         for i, fn in enumerate(predict_fns)]
        for t in self._threads:
            t.start()

    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    def predict(self, dense: np.ndarray, sparse: np.ndarray, timeout_s: float,
                fns: Sequence[PredictFn] | None = None) -> np.ndarray:
        """Probabilities for the rows, in order, computed by `fns` (one per predictor
        thread; default: the batcher's own); raises Overloaded or TimedOut."""
        n = len(dense)
        if n == 0:
            return np.empty(0, np.float32)
        # batch_wait_ms > 0 asks for bigger batches at some latency: then every request queues.
        if not self.wait_s and n <= self.max_rows and not self._queued_rows:
            for i, slot in enumerate(self._slots):
                if slot.acquire(blocking=False):
                    try:
                        return self._inline(i, dense, sparse, fns)
                    finally:
                        slot.release()
        starts = range(0, n, self.max_rows)
        ticket = Ticket(n, len(starts))
        with self._queued_lock:
            if self._queued_rows and self._queued_rows + n > self.max_queue_rows:
                raise Overloaded(f"{self._queued_rows} rows already queued "
                                 f"(serving.max_queue_rows={self.max_queue_rows})")
            self._queued_rows += n
        for s in starts:
            self._queue.put(Chunk(ticket, s, dense[s:s + self.max_rows],
                                  sparse[s:s + self.max_rows], fns))
        if not ticket.done.wait(timeout_s):
            # Chunks still queued are computed and dropped; the caller is answered now.
            raise TimedOut(f"no answer within serving.request_timeout_s={timeout_s:g}")
        if ticket.error is not None:
            raise ticket.error
        return ticket.out

    def _inline(self, index: int, dense: np.ndarray, sparse: np.ndarray,
                fns: Sequence[PredictFn] | None) -> np.ndarray:
        """One call on slot `index` (held by the caller) in the caller's thread."""
        predict = self._own[index] if fns is None else fns[index]
        t0 = time.perf_counter()
        probs = predict(dense, sparse)
        self._count(len(dense), time.perf_counter() - t0)
        return probs

    def _count(self, rows: int, seconds: float) -> None:
        with self.stats.lock:
            self.stats.batches += 1
            self.stats.rows += rows
            self.stats.seconds += seconds

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the predictor threads once the queue is drained."""
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _take(self, first: Chunk) -> tuple[list[Chunk], Chunk | None, bool]:
        """`first` plus queued chunks up to max_rows; returns (batch, carry, stop)."""
        batch, rows = [first], len(first)
        deadline = time.monotonic() + self.wait_s
        while rows < self.max_rows:
            try:
                if self.wait_s > 0:
                    left = deadline - time.monotonic()
                    item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                else:
                    item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, None, True
            if rows + len(item) > self.max_rows or item.fns is not first.fns:
                return batch, item, False
            batch.append(item)
            rows += len(item)
        return batch, None, False

    def _work(self, index: int, own: PredictFn) -> None:
        carry: Chunk | None = None
        stop = False
        while not stop or carry is not None:
            first = carry if carry is not None else self._queue.get()
            if first is None:
                return
            batch, carry, stop = self._take(first)
            rows = sum(len(c) for c in batch)
            predict = own if first.fns is None else first.fns[index]
            with self._slots[index]:
                t0 = time.perf_counter()
                try:
                    if len(batch) == 1:
                        probs = predict(first.dense, first.sparse)
                    else:
                        probs = predict(np.concatenate([c.dense for c in batch]),
                                        np.concatenate([c.sparse for c in batch]))
                    error = None
                except Exception as exc:  # answered to each request as a 500, thread lives on
                    probs, error = None, exc
                elapsed = time.perf_counter() - t0
            with self._queued_lock:
                self._queued_rows -= rows
            self._count(rows, elapsed)
            offset = 0
            for c in batch:
                if probs is not None:
                    c.ticket.out[c.start:c.start + len(c)] = probs[offset:offset + len(c)]
                offset += len(c)
                c.ticket.finish_chunk(error)
