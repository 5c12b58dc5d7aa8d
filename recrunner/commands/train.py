"""`recrun train`: train, evaluate each epoch, checkpoint, export."""

import argparse
import json
from pathlib import Path

from recrunner.config.schema import RootConfig

KEYS = ["dataset.train", "dataset.test", "dataset.format", "dataset.on_error", "runner.epochs",
        "runner.batch_size", "runner.learning_rate", "runner.seed", "runner.output_dir",
        "runner.resume", "runner.eval_steps", "runner.target_auc", "model.sparse_feature_number",
        "model.sparse_feature_dim", "mode.name"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--paddlerec-config", metavar="YAML", help="run a PaddleRec "
                        "config.yaml as it is (its runner: and hyper_parameters: sections)")
    parser.add_argument("-o", dest="paddlerec_opts", metavar="KEY=VALUE", action="append",
                        default=[], help="override a key of the PaddleRec config (repeatable)")
    parser.add_argument("--paddlerec-import", metavar="PATH", help="write the PaddleRec "
                        "config as an experiment file (conf/experiment/<name>.yaml) and stop")


def expand_overrides(args: argparse.Namespace, overrides: list[str]) -> list[str]:
    """--paddlerec-config: its keys as overrides before the command line's own."""
    import sys

    from recrunner.errors import RecrunnerError

    if not args.paddlerec_config:
        if args.paddlerec_opts or args.paddlerec_import:
            raise RecrunnerError("-o and --paddlerec-import need --paddlerec-config")
        return overrides
    if args.config_file:
        raise RecrunnerError("--paddlerec-config and --config-file exclude each other")
    from recrunner.config.compose import load
    from recrunner.config.paddlerec import translate

    model = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == "model"),
                 None)
    mapped = translate(Path(args.paddlerec_config), args.paddlerec_opts, model)
    for warning in mapped.warnings:
        print(f"recrun train: warning: {warning}", file=sys.stderr)
    expanded = [*mapped.overrides(), *overrides]
    if args.paddlerec_import:
        load(expanded)  # the file must compose before it is written
        out = Path(args.paddlerec_import)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(mapped.experiment_yaml())
        print(f"wrote {out}: train it with +experiment={out.stem} (from conf/experiment/)")
        raise SystemExit(0)
    return expanded


def check(cfg: RootConfig) -> None:
    """Before the run directory exists: the data is there and has rows."""
    from recrunner.data.prepare import ensure_dataset
    from recrunner.errors import RecrunnerError

    if str(cfg.mode.name) == "ps" and getattr(cfg.model, "embedding_l2", 0.0) > 0:
        raise RecrunnerError("model.embedding_l2 applies to mode=local and mode=collective; "
                             "mode=ps's tables live on the servers: set it to 0")
    schedule = [k for k in ("table_learning_rate", "lr_decay", "table_lr_decay")
                if getattr(cfg.runner, k) is not None]
    if str(cfg.mode.name) == "ps" and schedule:
        raise RecrunnerError(f"runner.{schedule[0]} applies to mode=local and mode=collective; "
                             "mode=ps's servers keep one constant rate: unset it")
    if str(cfg.mode.name) == "ps" and cfg.runner.epochs > 1 and not cfg.runner.online:
        import sys

        print("recrun train: warning: mode=ps trains every epoch at the same rates (its "
              "servers keep one); the decay after epoch 1 (runner.lr_decay) is mode=local's "
              "and mode=collective's", file=sys.stderr)
    if str(cfg.mode.name) == "ps" and getattr(cfg.model, "wide_crosses", None):
        raise RecrunnerError("model.wide_crosses applies to mode=local and mode=collective; "
                             "mode=ps serves one id table: set it to []")
    if str(cfg.mode.name) == "ps" and cfg.runner.init_from:
        check_ps_warm_start(cfg)
    if cfg.mode.elastic.enabled:
        from recrunner.fleet.elastic_launch import require_etcd3

        require_etcd3()
    ensure_dataset(cfg.dataset, cfg.runner.online)


def check_ps_warm_start(cfg: RootConfig) -> None:
    """runner.init_from in mode=ps, before any process starts (the trainers would each fail
    on it): the checkpoint the driver's warm start takes, with the servers' tables beside it."""
    from recrunner.errors import RecrunnerError
    from recrunner.fleet.ps import ps_tables_dir
    from recrunner.train import checkpoint
    from recrunner.train.build import model_fingerprint

    source = str(cfg.runner.init_from)
    ckpt = checkpoint.warm_start_from(source, model_fingerprint(cfg))
    if not ps_tables_dir(ckpt).is_dir():
        raise RecrunnerError(f"runner.init_from={source}: its checkpoint {ckpt.path} has no "
                             "parameter-server tables beside it (it was not written by mode=ps)")


def run(cfg: RootConfig, args: argparse.Namespace) -> int:
    from recrunner.data.prepare import ensure_dataset
    from recrunner.fleet.roles import in_fleet_job
    from recrunner.train.driver import train_local

    if str(cfg.mode.name) != "local":
        summary = run_fleet(cfg)
        if summary is None:  # a server, or a trainer that does not write
            return 0
    elif cfg.runner.online:
        from recrunner.online.passes import train_online

        summary = train_online(cfg)
    else:
        ensure_dataset(cfg.dataset)
        summary = train_local(cfg)
    print(json.dumps({k: summary[k] for k in ("auc", "logloss", "examples_per_sec", "epochs",
                                              "export_dir")}))
    # A fleet job's own processes finish cleanly; the launcher judges the job.
    if str(cfg.mode.name) == "local" or not in_fleet_job():
        check_target(cfg, summary["auc"])
    return 0


def objective(cfg: RootConfig) -> float:
    """What a sweep optimizes (`recrun train -m hydra/sweeper=optuna ...`): the test AUC of
    the exported model, as summary.json records it (every mode writes it there)."""
    return float(json.loads((Path(cfg.runner.output_dir) / "summary.json").read_text())["auc"])


def check_target(cfg: RootConfig, auc: float) -> None:
    """runner.target_auc not reached: exit 3 once the run (checkpoints, export) is complete,
    so that a pipeline step can retry with runner.resume=true."""
    from recrunner.errors import TargetNotReached

    target = cfg.runner.target_auc
    if target is not None and not auc >= target:
        raise TargetNotReached(
            f"final AUC {auc:.5f} is below runner.target_auc={target}; train longer with "
            f"runner.resume=true runner.epochs={cfg.runner.epochs + 1}")


def run_fleet(cfg: RootConfig) -> dict | None:
    """mode=collective|ps: launch the job here, or be one of its processes.

    The role comes from the environment (paddle.distributed.launch's, or the Paddle
    Operator's in a pod); without one this process is the launcher.
    """
    from recrunner.data.prepare import ensure_dataset
    from recrunner.fleet.roles import in_fleet_job

    if in_fleet_job():
        from recrunner.fleet.worker import run_worker

        return run_worker(cfg)
    ensure_dataset(cfg.dataset)
    if cfg.mode.elastic.enabled:
        from recrunner.fleet.elastic_launch import launch_elastic

        return launch_elastic(cfg)
    if cfg.mode.elastic.ps:
        from recrunner.elasticps.launch import launch_elastic_ps

        return launch_elastic_ps(cfg)
    from recrunner.fleet.launcher import launch

    return launch(cfg)
