"""`recrun pipeline`: data check, training, gate, promotion and smoke test, in one command
(cluster=k8s: the same steps as an Argo Workflow, or a CronWorkflow with pipeline.schedule)."""

import argparse

from recrunner.config.pipeline import Step
from recrunner.config.schema import RootConfig

KEYS = ["runner.output_dir", "serving.model_dir", "serving.host", "serving.port",
        "runner.target_auc", "pipeline.steps", "pipeline.max_regression", "pipeline.retries",
        "pipeline.max_bad_row_share", "pipeline.max_p99_ms", "pipeline.serve",
        "pipeline.schedule", "pipeline.canary_percent"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--step", choices=[str(s) for s in Step],
                        help="run only this step (the workflow's containers do)")
    parser.add_argument("--workflow", action="store_true",
                        help="with --step: run as an Argo Workflow's step (the serving "
                             "resource serves the model: no local server is started or told)")
    parser.add_argument("--report", metavar="STATUS",
                        help="print every step's decision and record the run's outcome "
                             "(the workflow's exit handler passes {{workflow.status}})")
    parser.add_argument("--dry-run", action="store_true",
                        help="cluster=k8s: print the Workflow (and what it needs); send nothing")
    parser.add_argument("-o", "--output-dir", metavar="DIR",
                        help="cluster=k8s: write one YAML file per resource into DIR")


def check(cfg: RootConfig) -> None:
    from recrunner.errors import RecrunnerError
    from recrunner.pipeline.steps import served_dir

    if cfg.serving.sparse.store == "redis":  # the gate and promote steps publish exports
        raise RecrunnerError("recrun pipeline promotes whole exports: it takes "
                             "serving.sparse.store=memory (the sparse tier is fed by recrun "
                             "publish from an online run, docs/online.md)")
    if cfg.cluster.name == "local":  # a workflow's steps run in pods: paths are theirs
        served_dir(cfg)


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.errors import RecrunnerError

    if args.workflow and not args.step:
        raise RecrunnerError("--workflow goes with --step")
    if args.report:
        from recrunner.pipeline.run import report

        return report(cfg, args.report)
    if cfg.cluster.name == "k8s" and not args.step:
        from recrunner.pipeline.submit import submit

        return submit(cfg, args)
    if args.dry_run or args.output_dir:
        raise RecrunnerError("--dry-run and -o render the Argo Workflow: add cluster=k8s")
    from recrunner.pipeline.run import run_pipeline

    return run_pipeline(cfg, Step(args.step) if args.step else None, args.workflow)
