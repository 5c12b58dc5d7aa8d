"""`recrun publish`: load an online run's model versions into the sparse store's Redis nodes
and make the newest live (recrunner.sparse.publish); `--follow` keeps doing it as new
versions appear, until SIGTERM."""

import argparse
import logging
import threading
from pathlib import Path

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError

DATASET_PATHS: tuple[str, ...] = ()  # reads versions, not data
KEYS = ["runner.output_dir", "serving.sparse.shards", "serving.sparse.replicas",
        "serving.sparse.prefix"]

log = logging.getLogger("recrunner.publish")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", metavar="DIR",
                        help="the online run's output dir (default: runner.output_dir)")
    parser.add_argument("--version", type=int, metavar="N",
                        help="make version N live (default: the newest)")
    parser.add_argument("--follow", action="store_true",
                        help="keep publishing each new version until SIGTERM")
    parser.add_argument("--interval", type=float, default=5.0, metavar="S",
                        help="--follow: seconds between looks for a new version (default 5)")


def check(cfg: RootConfig) -> None:
    if str(cfg.serving.sparse.store) != "redis":
        raise RecrunnerError("recrun publish needs serving.sparse.store=redis and "
                         "serving.sparse.shards=[host:port,...]")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.online import versions
    from recrunner.sparse.publish import Publisher, stop_on_signals
    from recrunner.sparse.store import NodeUnreachable, ShardDown

    run_dir = Path(args.run or cfg.runner.output_dir)
    if not (run_dir / versions.ROOT).is_dir() and not args.follow:
        raise RecrunnerError(f"{run_dir} has no {versions.ROOT}/: train it with "
                             "runner.online=true")
    if args.interval <= 0:
        raise RecrunnerError(f"--interval {args.interval:g} must be greater than 0")
    publisher = Publisher(cfg.serving.sparse, run_dir, cfg.serving.threads)
    try:
        if args.follow:
            stop = threading.Event()
            stop_on_signals(stop)
            log.info("publishing new versions of %s every %g s", run_dir, args.interval)
            publisher.follow(args.interval, stop)
            return 0
        version = publisher.publish(args.version)
    except ShardDown as exc:  # a node down: not the user's input (exit 1)
        raise NodeUnreachable(str(exc)) from None
    print(f"version {version} of {run_dir} is live on {len(cfg.serving.sparse.shards)} nodes")
    return 0
