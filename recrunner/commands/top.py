"""`recrun top`: the autoscaled jobs (submitted, pending, trainers per job) and the CPU in
use, refreshed every autoscale.interval_s (plain lines when the output is not a terminal)."""

import argparse
import contextlib

from recrunner.config.schema import RootConfig

DATASET_PATHS: tuple[str, ...] = ()  # reads no data


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=int, metavar="N", help="stop after N looks")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.autoscale.top import watch
    from recrunner.commands.autoscale import cluster_for

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: a normal way to stop
        watch(cluster_for(cfg), cfg.autoscale.interval_s, args.count)
    return 0
