"""`recrun delete cluster=k8s`: remove the PaddleJob and what `recrun submit` created with it."""

import argparse

from recrunner.config.schema import RootConfig

KEYS = ["cluster.namespace", "cluster.job_name", "dataset.sampleset.name"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the SampleSet cache, the model volume and the JuiceFS Secret")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.k8s import ops
    from recrunner.k8s.client import Kube

    names = ops.validate_names(cfg)
    kube = Kube(cfg.cluster.context)
    for ref in ops.targets(cfg, names, args.keep_data):
        print(f"{ref} {kube.delete(ref)}")
    return 0
