"""`recrun serve`: serve an export over HTTP here, or (cluster=k8s) ship it as a PaddleService
or a KServe InferenceService (serving.k8s.kind)."""

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from recrunner.config.schema import RootConfig

if TYPE_CHECKING:
    from recrunner.serving.server import Server

# The export carries its schema: no dataset file is read.
DATASET_PATHS: tuple[str, ...] = ()
KEYS = ["serving.model_dir", "runner.output_dir", "serving.host", "serving.port",
        "serving.max_batch_rows", "serving.batch_wait_ms", "serving.workers", "serving.threads",
        "serving.max_body_bytes", "serving.request_timeout_s", "cluster.name",
        "serving.k8s.kind", "serving.k8s.image", "serving.k8s.bundle_url",
        "serving.k8s.storage_uri", "serving.k8s.min_scale", "serving.k8s.max_scale",
        "serving.k8s.metric", "serving.k8s.target"]

log = logging.getLogger("recrunner.serve")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="cluster=k8s: print the serving resource; contact no server and "
                             "write nothing (unless --bundle)")
    parser.add_argument("--bundle", action="store_true",
                        help="cluster=k8s with --dry-run: also pack the Paddle Serving bundle")


def check(cfg: RootConfig) -> None:
    """cluster=k8s: the serving resource's cross-key checks, before Hydra starts the run."""
    if str(cfg.cluster.name) == "k8s":
        from recrunner.k8s.serving import validate_serving

        validate_serving(cfg)


def model_dir(cfg: RootConfig) -> Path:
    return Path(cfg.serving.model_dir or Path(cfg.runner.output_dir) / "export")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    if str(cfg.cluster.name) == "k8s":
        from recrunner.serving.k8s import serve_on_k8s

        return serve_on_k8s(cfg, model_dir(cfg), dry_run=args.dry_run,
                            bundle=args.bundle or not args.dry_run)
    return serve_here(cfg)


def reload_on_hangup(server: "Server") -> None:
    """SIGHUP: swap in the export now in the model directory (refusals are logged)."""

    def on_hangup(signum: int, frame: object) -> None:
        # Load off the main thread: the export's check takes seconds.
        threading.Thread(target=server.reload, args=("SIGHUP",), daemon=True).start()

    signal.signal(signal.SIGHUP, on_hangup)


def limit_malloc_arenas(arenas: int = 2) -> None:
    """glibc gives each thread that allocates its own malloc arena (up to 8 per core), and
    memory freed into one is rarely returned: with request threads, each hot swap's freed model
    grew the resident size by ≈ 7 MB (flat with 2 arenas; docs/reliability.md). A no-op
    off glibc."""
    import ctypes
    import ctypes.util

    m_arena_max = -8  # glibc's malloc.h
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(m_arena_max, arenas)
    except (OSError, AttributeError):
        pass


def serve_here(cfg: RootConfig) -> int:
    from recrunner.runtime import import_paddle
    from recrunner.serving.server import Server

    limit_malloc_arenas()  # before any thread allocates
    server = Server(cfg.serving, model_dir(cfg))
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    def install_handlers() -> None:
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        reload_on_hangup(server)

    # Paddle installs its own SIGTERM handler (a crash dump, no drain) when imported: import it
    # first, then take the signals back. The sparse store's server runs no Paddle at all.
    if cfg.serving.sparse.store == "memory":
        import_paddle(cfg.serving.threads)
    install_handlers()
    server.start()
    print(f"recrun serve: {server.app.repo.source} on {server.url} (loading; GET /healthz says "
          "when ready)", file=sys.stderr, flush=True)
    ready_said = False
    while not stop.wait(0.05):
        if server.load_error is not None:
            server.stop(0)
            print(f"recrun serve: error: {server.app.failed}", file=sys.stderr, flush=True)
            return 1
        if not ready_said and server.app.ready.is_set():
            install_handlers()  # in case loading an engine replaced them
            name = server.app.plane.loaded.name if server.app.plane.loaded else "?"
            print(f"recrun serve: ready: POST {server.url}/GeneralModelService/inference, "
                  f"/<name>/prediction, /predict, /v2/models/{name}/infer; gRPC "
                  f"GeneralModelService and GRPCInferenceService on {server.grpc_target}",
                  file=sys.stderr, flush=True)
            ready_said = True
    inflight = server.app.inflight
    print(f"recrun serve: shutting down ({inflight} request(s) in flight)", file=sys.stderr,
          flush=True)
    finished = server.stop()
    if not finished:
        print(f"recrun serve: requests still running after serving.shutdown_timeout_s="
              f"{cfg.serving.shutdown_timeout_s:g}; exiting", file=sys.stderr, flush=True)
        return 1
    print("recrun serve: stopped", file=sys.stderr, flush=True)
    return 0
