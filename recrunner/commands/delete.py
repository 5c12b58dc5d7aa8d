"""`recrun delete cluster=k8s`: remove the PaddleJob and what `recrun submit` created with it,
and (--serving / --all) the serving resource of `recrun serve cluster=k8s`."""

import argparse

from recrunner.config.schema import RootConfig

# Only the cluster is asked: no dataset file is read.
DATASET_PATHS: tuple[str, ...] = ()
KEYS = ["cluster.namespace", "cluster.job_name", "dataset.sampleset.name", "serving.k8s.kind",
        "serving.k8s.name"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the SampleSet cache, the model volume and the JuiceFS Secret")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--serving", action="store_true",
                       help="remove only the serving resource (serving.k8s.kind) of "
                            "`recrun serve cluster=k8s`")
    which.add_argument("--all", action="store_true",
                       help="remove the pipeline's runs and the serving resource too, then the "
                            "job's resources")
    parser.add_argument("--pipeline", action="store_true",
                        help="remove the runs of `recrun pipeline cluster=k8s`, its "
                             "CronWorkflow and its ServiceAccount, Role and RoleBinding")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.k8s import ops
    from recrunner.k8s.client import Kube
    from recrunner.k8s.secrets import known_values

    names = ops.validate_names(cfg)
    kube = Kube(cfg.cluster.context, secrets=known_values(cfg.cluster.juicefs))
    if args.pipeline or args.all:  # first: a running workflow would recreate the job
        from recrunner.pipeline.cluster import delete

        for line in delete(kube, names):
            print(line)
        if args.pipeline and not args.all:
            return 0
    for ref in ops.targets(cfg, names, args.keep_data, job=not args.serving,
                           serving=args.serving or args.all):
        print(f"{ref} {kube.delete(ref)}")
    if not (args.serving or args.all):
        ref = ops.serving_ref(cfg, names)
        if kube.get(ref, kind_optional=True) is not None:
            ops.note(f"{ref} still serves in namespace {ref.namespace}: `recrun delete "
                     "--serving` (same overrides) removes it")
    return 0
