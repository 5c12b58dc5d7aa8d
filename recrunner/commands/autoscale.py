"""`recrun autoscale`: resize the elastic jobs against each other and the capacity (Paddle
EDL's policy, recrunner.autoscale): cluster=local, this machine's jobs in autoscale.runs_dir
(started with mode.elastic.autoscaled=true); cluster=k8s, the elastic PaddleJobs of
cluster.namespace."""

import argparse
import contextlib
import logging
import signal
import sys
from typing import TYPE_CHECKING

from recrunner.config.schema import RootConfig

if TYPE_CHECKING:
    from recrunner.autoscale.cluster import Cluster

DATASET_PATHS: tuple[str, ...] = ()  # reads no data


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true", help="one round, then exit")
    parser.add_argument("--render", action="store_true",
                        help="cluster=k8s: print the autoscaler's Deployment, ServiceAccount "
                             "and roles for an administrator to apply, and exit")


def render(cfg: RootConfig) -> str:
    """The in-cluster autoscaler's documents, schema-checked, as YAML."""
    from recrunner.errors import RecrunnerError
    from recrunner.k8s import kinds, manifests, validate

    if str(cfg.cluster.name) != "k8s":
        raise RecrunnerError("recrun autoscale --render renders for cluster=k8s")
    validate.validate_config(cfg)
    docs = manifests.build(kinds.Creator.autoscale, cfg, manifests.names_for(cfg))
    validate.validate_documents(docs, None)
    return manifests.dump_all(docs)


def cluster_for(cfg: RootConfig) -> "Cluster":
    """The jobs' cluster: this machine's runs, or the Kubernetes namespace."""
    if str(cfg.cluster.name) == "k8s":
        from recrunner.autoscale.kube import KubeCluster
        from recrunner.k8s.client import Kube

        return KubeCluster(Kube(cfg.cluster.context), cfg.cluster.namespace)
    from pathlib import Path

    from recrunner.autoscale.local import LocalCluster

    return LocalCluster(Path(cfg.autoscale.runs_dir), cfg.autoscale.capacity)


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.autoscale.controller import Controller

    if args.render:
        print(render(cfg), end="")
        return 0

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                        format="%(asctime)s recrun autoscale: %(message)s")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    a = cfg.autoscale
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: a normal way to stop
        Controller(cluster_for(cfg), a.cooldown_s).run(a.interval_s, a.once or args.once)
    return 0
