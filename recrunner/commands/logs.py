"""`recrun logs cluster=k8s [--role worker --index 0 | --step STEP]`: one PaddleJob pod's
output, or that of a step of the newest pipeline run."""

import argparse

from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError

# Only the cluster is asked: no dataset file is read.
DATASET_PATHS: tuple[str, ...] = ()
KEYS = ["cluster.namespace", "cluster.job_name", "mode.name"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--role", choices=("worker", "ps"), default="worker",
                        help="which PaddleJob role's pod (default worker)")
    parser.add_argument("--index", type=int, default=0, help="the pod's index in its role")
    parser.add_argument("--step", help="a step of the newest `recrun pipeline cluster=k8s` "
                        "run (data, gate, smoke, promote, report, ...); its training is the "
                        "PaddleJob's (--role, --index)")
    parser.add_argument("-f", "--follow", action="store_true", help="stream while it runs")
    parser.add_argument("--tail", type=int, metavar="N", help="only the last N lines")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.k8s import ops
    from recrunner.k8s.client import Kube, write_stream
    from recrunner.k8s.manifests import CONTAINER, job_roles
    from recrunner.k8s.secrets import known_values
    from recrunner.redact import scrub_stream

    names = ops.validate_names(cfg)
    if args.tail is not None and args.tail < 0:
        raise RecrunnerError(f"--tail {args.tail} must be >= 0")
    values = known_values(cfg.cluster.juicefs)
    if args.step:
        from recrunner.pipeline.cluster import step_pod

        kube = Kube(cfg.cluster.context, secrets=values)
        pod = step_pod(kube, names, args.step)
        write_stream(scrub_stream(kube.pod_log(pod, names.namespace, "main",
                                               follow=args.follow, tail=args.tail), values))
        return 0
    roles = job_roles(cfg)
    if args.role not in roles:
        raise RecrunnerError(f"--role {args.role}: mode={cfg.mode.name} runs only "
                             f"{', '.join(roles)} pods")
    if not 0 <= args.index < roles[args.role]:
        raise RecrunnerError(f"--index {args.index}: the job has {roles[args.role]} "
                             f"{args.role} pod(s), index 0..{roles[args.role] - 1}")
    # The operator names pods <job>-<role>-<index>.
    pod = f"{names.job}-{args.role}-{args.index}"
    # A pod's log may quote a credential (a failed JuiceFS mount, a tracking URI): the ones
    # this machine knows are scrubbed, as `recrun status` does.
    kube = Kube(cfg.cluster.context, secrets=values)
    write_stream(scrub_stream(kube.pod_log(pod, names.namespace, CONTAINER,
                                           follow=args.follow, tail=args.tail), values))
    return 0
