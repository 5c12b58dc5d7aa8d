"""The model being served, and new exports swapped in while requests keep flowing.

A `ModelRepository` holds the current `LoadedModel` (one export: its request spec, its engine's
predict functions and a content version). A reload (the directory changed, `POST
/v2/repository/models/<name>/load`, or SIGHUP) loads the export next to the running one, runs
the export's self-check (its engine must reproduce `probe.npz`), and replaces the reference in
one assignment. A request takes the reference once and parses, predicts and replies with that
model alone, so every reply comes from exactly one version; the old model is freed when its
last request is answered. An export that fails to load or check, lacks its probe, or changes
while it is being read is refused and logged, and the old model keeps serving.
"""

import contextlib
import hashlib
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recrunner.export import META_FILE, OUTPUT, PROBE_FILE
from recrunner.export.spec import MODEL_PREFIX
from recrunner.serving import protocol
from recrunner.serving.engine import Engine, load_engine

log = logging.getLogger(__name__)

# The files whose change means a new export (export.json is written last by save_export).
WATCHED = (META_FILE, PROBE_FILE, f"{MODEL_PREFIX}.json", f"{MODEL_PREFIX}.pdiparams")
Stamp = tuple[tuple[int, int, int] | None, ...]


def stamp_of(model_dir: Path) -> Stamp:
    """Inode, mtime and size of the export's files: cheap to poll, and changed by an in-place
    rewrite as well as by a directory swapped in with a rename (new inodes)."""
    out: list[tuple[int, int, int] | None] = []
    for name in WATCHED:
        try:
            st = (model_dir / name).stat()
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


def content_version(model_dir: Path) -> str:
    """The export's version: a digest of its metadata and weights (the same files give the same
    version wherever they were copied)."""
    digest = hashlib.sha256()
    for name in (META_FILE, f"{MODEL_PREFIX}.json", f"{MODEL_PREFIX}.pdiparams"):
        with open(model_dir / name, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()[:12]


def export_name(meta: dict[str, Any]) -> str:
    """The model's name as export.json records it (e.g. wide_deep)."""
    name = meta.get("model")
    if isinstance(name, dict):
        name = name.get("name")
    return str(name) if name else "model"


@dataclass(frozen=True, eq=False)  # compared and hashed by identity (held in a WeakSet)
class LoadedModel:
    """One export, loaded and checked: everything a reply is computed from, as every protocol
    (HTTP or gRPC) sees it."""

    name: str  # the served name: serving.model_name, or the export's model name
    version: str
    spec: protocol.Model  # what request checks need: schema, feeds, output names
    engine: Engine
    stamp: Stamp
    loaded_at: float = field(default_factory=time.time)

    @property
    def meta(self) -> dict[str, Any]:
        """export.json: inputs/outputs with dtypes and shapes."""
        return self.engine.meta


class LoadRefused(Exception):
    """The export was not swapped in; the message is one line and names the directory."""


@dataclass
class ReloadResult:
    swapped: bool
    version: str
    message: str


class ModelRepository:
    # A changed directory is loaded once it has stayed the same for one poll (a copy in
    # progress is not read half-way).
    settle = True

    def __init__(self, model_dir: Path, engine: str, threads: int, workers: int,
                 name: str | None = None) -> None:
        self.model_dir = Path(model_dir)
        self._name = name  # serving.model_name; None: each export's own
        self._engine, self._threads, self._workers = engine, threads, workers
        # Read without a lock: one attribute assignment is atomic, and a request keeps the
        # object it read for its whole life.
        self.current: LoadedModel | None = None
        self._lock = threading.Lock()  # one load at a time
        self.swaps = 0
        self.refusals = 0
        self.last_error = ""
        self.last_swap_seconds = 0.0
        self._refused_stamp: Stamp | None = None
        self._unreachable = ""  # why the last poll could not look, if it could not
        # Every version loaded, while anything still refers to it (requests in flight).
        self._alive: weakref.WeakSet[LoadedModel] = weakref.WeakSet()

    # --- loading -----------------------------------------------------------------------------

    @property
    def source(self) -> str:
        """Where models come from, for people (logs, /healthz)."""
        return str(self.model_dir)

    def stamp(self) -> Stamp:
        """What changes when there is a new model to load."""
        return stamp_of(self.model_dir)

    def tick(self) -> None:
        """Called at every poll of the watcher (after any reload)."""

    def _load(self, require_probe: bool) -> LoadedModel:
        before = stamp_of(self.model_dir)
        if require_probe and not (self.model_dir / PROBE_FILE).is_file():
            raise LoadRefused(f"{self.model_dir} has no {PROBE_FILE}: the export cannot be "
                              "self-checked (half-written, or exported before the check)")
        try:
            engine = load_engine(self.model_dir, self._engine, self._threads, self._workers)
            version = content_version(self.model_dir)
        except Exception as exc:
            raise LoadRefused(f"cannot load {self.model_dir}: {_one_line(exc)}") from exc
        if stamp_of(self.model_dir) != before:
            raise LoadRefused(f"{self.model_dir} changed while it was being loaded (still being "
                              "written?); it is loaded once it stops changing")
        exported = engine.exported
        assert exported is not None
        spec = protocol.Model(exported.schema, (OUTPUT, *exported.predictor.get_output_names()))
        loaded = LoadedModel(self._name or export_name(exported.meta), version, spec, engine,
                             before)
        self._alive.add(loaded)
        return loaded

    def load_initial(self) -> LoadedModel:
        """The first load; its errors are the server's start-up errors."""
        with self._lock:
            self.current = self._load(require_probe=False)
            log.info("serving %s version %s", self.source, self.current.version)
            return self.current

    def reload(self, reason: str) -> ReloadResult:
        """Load the export in the model directory and swap it in; LoadRefused (logged, the
        current model keeps serving) when it is broken. A no-op when nothing changed."""
        with self._lock:
            current = self.current
            try:
                stamp = self.stamp()
            except LoadRefused as exc:
                self.refusals += 1
                self.last_error = str(exc)
                raise
            if current is not None and stamp == current.stamp:
                return ReloadResult(False, current.version, "unchanged")
            t0 = time.perf_counter()
            try:
                new = self._load(require_probe=True)
            except LoadRefused as exc:
                self.refusals += 1
                self.last_error = str(exc)
                self._refused_stamp = stamp
                # The text, not the exception: a kept log record must not keep its traceback's
                # frames (and the model they refer to) alive.
                log.error("%s: refused (%s); still serving version %s", reason, self.last_error,
                          current.version if current else "none")
                raise
            if current is not None and new.version == current.version:
                # Same content (e.g. copied again): keep the loaded one, remember the stamp.
                self.current = LoadedModel(current.name, current.version, current.spec,
                                           current.engine, new.stamp, current.loaded_at)
                return ReloadResult(False, current.version, "unchanged content")
            self.current = new  # the swap: requests from here on use the new model
            self.swaps += 1
            self.last_swap_seconds = time.perf_counter() - t0
            self._refused_stamp = None
            log.info("%s: now serving version %s (was %s; loaded in %.2f s)", reason,
                     new.version, current.version if current else "none",
                     self.last_swap_seconds)
            return ReloadResult(True, new.version, f"loaded in {self.last_swap_seconds:.2f} s")

    # --- watching ----------------------------------------------------------------------------

    def watch(self, interval_s: float, stop: threading.Event) -> threading.Thread:
        """Poll the model's source every `interval_s` and reload on a change (a directory once
        the change has stayed the same for one interval: a copy in progress is not read
        half-way)."""

        def loop() -> None:
            seen: Stamp | None = None
            while not stop.wait(interval_s):
                try:
                    seen = self.poll_once(seen)
                    self.tick()
                except Exception:  # a bug must not end the watcher
                    log.exception("watching %s failed", self.source)
                    seen = None

        thread = threading.Thread(target=loop, name="model-watch", daemon=True)
        thread.start()
        return thread

    def poll_once(self, seen: Stamp | None) -> Stamp | None:
        """One look at the source; returns the new stamp while it settles, else None."""
        current = self.current
        try:
            stamp = self.stamp()
        except LoadRefused as exc:  # the source is unreachable: keep serving what we have
            if str(exc) != self._unreachable:  # once, not at every poll
                log.warning("cannot look for a new model: %s", exc)
            self._unreachable = str(exc)
            return None
        self._unreachable = ""
        if current is None or stamp == current.stamp or stamp == self._refused_stamp:
            return None
        if self.settle and stamp != seen:  # changed since the last look: wait for it to settle
            return stamp
        with contextlib.suppress(LoadRefused):  # logged; retried when the source changes again
            self.reload("model directory changed" if self.settle else "new live version")
        return None

    # --- reporting ---------------------------------------------------------------------------

    def status(self) -> dict[str, object]:
        current = self.current
        out: dict[str, object] = {"model_version": current.version if current else None,
                                  "model_swaps": self.swaps, "model_refusals": self.refusals,
                                  "models_in_memory": len(self._alive)}
        if self.last_error:
            out["last_refusal"] = self.last_error
        return out

    def metric_lines(self, prefix: str) -> list[str]:
        """Prometheus lines: the version served (an info gauge), swaps and refusals."""
        current = self.current
        lines = [f"# HELP {prefix}_model_info The model version being served.",
                 f"# TYPE {prefix}_model_info gauge"]
        if current is not None:
            lines.append(f'{prefix}_model_info{{model="{current.name}",'
                         f'version="{current.version}"}} 1')
        for metric, kind, text, value in (
                ("model_swaps_total", "counter", "New model versions swapped in.", self.swaps),
                ("model_load_refusals_total", "counter", "Exports refused (broken, half-written, "
                 "failed self-check); the old model kept serving.", self.refusals),
                ("models_in_memory", "gauge", "Model versions still held (the served one, and "
                 "old ones until their last request is answered).", len(self._alive))):
            lines += [f"# HELP {prefix}_{metric} {text}", f"# TYPE {prefix}_{metric} {kind}",
                      f"{prefix}_{metric} {value}"]
        lines += [f"# HELP {prefix}_model_load_seconds Time the last swap took to load and "
                  "check the export.", f"# TYPE {prefix}_model_load_seconds gauge",
                  f"{prefix}_model_load_seconds {self.last_swap_seconds:.6f}"]
        return lines


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
