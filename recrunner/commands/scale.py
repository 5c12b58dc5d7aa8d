"""`recrun scale RUN_DIR --trainers N`: change the trainer count of the elastic parameter-server
job running in RUN_DIR on this machine (a cluster job: change its trainers' replicas)."""

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the job's runner.output_dir")
    parser.add_argument("--trainers", type=int, required=True, metavar="N",
                        help="trainers to run (between the job's mode.elastic.min_trainers and "
                             "max_trainers)")


def run(cfg: None, args: argparse.Namespace) -> int:
    from recrunner.elasticps.scale import set_target

    print(set_target(Path(args.run_dir), args.trainers))
    return 0
