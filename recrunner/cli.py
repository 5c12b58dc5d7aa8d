"""`recrun <command> [options] [key=value ...]`: one entry point, Hydra overrides for every key."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from recrunner import __version__
from recrunner.errors import Interrupted, RecrunnerError, TargetNotReached
from recrunner.redact import install_log_scrubber, refuse_inline_credentials, scrub

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from recrunner.config.schema import RootConfig


@dataclass(frozen=True)
class Command:
    module: str
    summary: str
    # Commands that write a run directory keep Hydra's output dir and job log.
    writes_run_dir: bool = False
    # Commands that only read files they are given (no config, no Hydra).
    uses_config: bool = True


COMMANDS: dict[str, Command] = {
    "train": Command("recrunner.commands.train", "train a model and export it", True),
    "eval": Command("recrunner.commands.eval", "AUC and logloss of a checkpoint or export"),
    "predict": Command("recrunner.commands.predict", "click probabilities for raw rows"),
    "data": Command("recrunner.commands.data", "generate the synthetic dataset, or report on one"),
    "serve": Command("recrunner.commands.serve", "serve an export over HTTP (or cluster=k8s)"),
    "bench-serve": Command("recrunner.commands.bench_serve", "load-test a running server"),
    "submit": Command("recrunner.commands.submit", "render and apply the PaddleJob (cluster=k8s)"),
    "status": Command("recrunner.commands.status", "phase and pods of the submitted PaddleJob"),
    "logs": Command("recrunner.commands.logs", "output of one PaddleJob pod (--role, --index)"),
    "delete": Command("recrunner.commands.delete", "remove the PaddleJob and its resources"),
    "publish": Command("recrunner.commands.publish", "load an online run's model versions into "
                       "the sparse store's Redis shards (serving.sparse)"),
    "pipeline": Command("recrunner.commands.pipeline", "data, train, gate, promote, smoke: one "
                        "gated run to a served model (cluster=k8s: an Argo Workflow)"),
    "report": Command("recrunner.commands.report", "curves of runs or a sweep: png + html",
                      uses_config=False),
    "autoscale": Command("recrunner.commands.autoscale", "resize elastic jobs against each "
                         "other and the free capacity (autoscale.*)"),
    "top": Command("recrunner.commands.top", "autoscaled jobs, pending jobs, trainers per job "
                   "and CPU in use"),
    "scale": Command("recrunner.commands.scale", "change the trainer count of an elastic PS "
                     "job running here (mode.elastic.max_trainers)", uses_config=False),
}

# `hydra/sweeper=optuna` unless told otherwise: the objective is the test AUC (higher is
# better), and a job that fails is a failed trial (its error printed, the exit code non-zero),
# not the end of the search.
OPTUNA_DEFAULTS = {"hydra.sweeper.direction": "maximize", "hydra.sweeper.max_failure_rate": "1.0"}

# Hydra's own flags that take a value (the rest of argv is key=value overrides).
HYDRA_VALUE_FLAGS = {"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name",
                     "-cn", "--config-dir", "-cd", "--experimental-rerun"}
INFO_CHOICES = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}
# Hydra flags that only report (tab completion, --info): no run, so no input checks first.
HYDRA_REPORT_FLAGS = {"--hydra-help", "-sc", "--shell-completion", "--info", "-i"}


def split_overrides(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate Hydra flags (kept for hydra.main) from key=value overrides."""
    flags, overrides = [], []
    it = iter(tokens)
    for tok in it:
        if tok.startswith("-"):
            flags.append(tok)
            if tok in HYDRA_VALUE_FLAGS:
                flags.append(next(it, ""))
        elif flags and flags[-1] in ("--info", "-i") and tok in INFO_CHOICES:
            flags.append(tok)  # --info's optional value
        else:
            overrides.append(tok)
    return flags, overrides


def sweeper_defaults(overrides: Sequence[str]) -> list[str]:
    if "hydra/sweeper=optuna" not in overrides:
        return []
    given = {item.split("=", 1)[0].lstrip("+~") for item in overrides}
    return [f"{key}={value}" for key, value in OPTUNA_DEFAULTS.items() if key not in given]


def print_usage() -> None:
    print("usage: recrun <command> [options] [key=value ...]\n")
    print("Train, evaluate, serve and ship CTR ranking models from one Hydra config tree.\n")
    print("commands:")
    for name, cmd in COMMANDS.items():
        print(f"  {name:<12} {cmd.summary}")
    print("\n`recrun <command> --help` lists its config groups and most used keys.")
    print("Overrides use Hydra syntax: mode=collective, +mode=local, runner.epochs=3, -m a=1,2")


def print_command_help(name: str, module: ModuleType, parser: argparse.ArgumentParser,
                       overrides: list[str]) -> None:
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from recrunner.config.compose import GROUPS, compose_config, hydra_context

    print(f"usage: recrun {name} [options] [group=option ...] [key=value ...]\n")
    print(f"{COMMANDS[name].summary}\n")
    if parser._actions:
        print(parser.format_help().split("\n", 2)[-1].strip() + "\n")
    cfg = compose_config(overrides)
    with hydra_context():
        loader = GlobalHydra.instance().config_loader()
        print("config groups (group=option):")
        for group in GROUPS:
            options = [o for o in loader.get_group_options(group)]
            current = OmegaConf.select(cfg, f"{group}.name")
            if group == "logger":  # several at once (logger=[a,b]), or none
                current = ",".join(k for k, v in cfg.logger.items() if v is not None) or "none"
            print(f"  {group:<10} {', '.join(options)}  (now: {current})")
    print("\nmost used keys (now):")
    for key in getattr(module, "KEYS", ()):
        print(f"  {key} = {OmegaConf.select(cfg, key, throw_on_missing=False)}")
    print("\nHydra flags: --cfg job (print the resolved config), -m (multirun sweep; with"
          " hydra/sweeper=optuna: a search), --hydra-help")


def run_once(task: Callable[[DictConfig, RootConfig | None], Any], overrides: list[str],
             check: Callable[[RootConfig], RootConfig], unused_paths: Sequence[str] = ()) -> None:
    """One job through Hydra's own job runner (run directory, .hydra/ files, job logging,
    HydraConfig) on a config composed once, checked before the run directory exists.
    hydra.main composes it twice more after the checks: 0.4-0.8 s each."""
    # What Hydra.run does after composing, with its own parts: run_job is public; Callbacks
    # is internal but stable within the pinned hydra-core 1.3 (setup.py).
    from hydra._internal.callbacks import Callbacks
    from hydra.core.utils import run_job
    from hydra.types import HydraContext

    from recrunner.config.compose import compose_with_loader, to_typed, without_hydra_node

    # hydra.mode=RUN: the override hydra.main adds (so .hydra/hydra.yaml is the same).
    cfg, loader = compose_with_loader([*overrides, "hydra.mode=RUN"], hydra_node=True)
    typed = check(to_typed(without_hydra_node(cfg), unused_paths))
    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name="config")
    try:
        ret = run_job(task_function=lambda job: task(job, typed), config=cfg,
                      job_dir_key="hydra.run.dir",
                      job_subdir_key=None,
                      hydra_context=HydraContext(config_loader=loader, callbacks=callbacks))
    except OSError as exc:  # the run directory, its .hydra/ files or its log (the task's own
        # errors are in `ret`)
        where = exc.filename or cfg.hydra.run.dir
        raise RecrunnerError(f"runner.output_dir: cannot write {where}: "
                             f"{exc.strerror or exc}") from None
    callbacks.on_run_end(config=cfg, config_name="config", job_return=ret)
    ret.return_value  # noqa: B018 - raises what the task raised, as hydra.main does


def run_command(name: str, argv: Sequence[str]) -> int:
    from recrunner.config.compose import DATASET_PATHS, load, normalize_overrides, to_typed

    cmd = COMMANDS[name]
    install_log_scrubber()  # credentials never reach a log line
    module = importlib.import_module(cmd.module)
    # The dataset files the command reads (its DATASET_PATHS; both unless it says otherwise):
    # the others need not be given (`recrun predict dataset=avazu ...`).
    unused = [k for k in DATASET_PATHS if k not in getattr(module, "DATASET_PATHS", DATASET_PATHS)]
    # Config commands print their own --help (groups and keys); the others, argparse's.
    parser = argparse.ArgumentParser(prog=f"recrun {name}", add_help=not cmd.uses_config)
    if cmd.uses_config:
        parser.add_argument("--config-file", metavar="PATH", help="use this resolved config "
                            "(e.g. a mounted ConfigMap) instead of conf/")
    if hasattr(module, "add_arguments"):
        module.add_arguments(parser)
    if not cmd.uses_config:
        return module.run(None, parser.parse_args(argv)) or 0
    if "-h" in argv or "--help" in argv:  # before the command's required arguments
        _, overrides = split_overrides(normalize_overrides(
            [a for a in argv if a not in ("-h", "--help")]))
        with contextlib.suppress(BrokenPipeError):  # `recrun x --help | head`
            print_command_help(name, module, parser, [o for o in overrides if "=" in o])
        return 0
    args, rest = parser.parse_known_args(argv)
    flags, overrides = split_overrides(normalize_overrides(rest))
    if hasattr(module, "expand_overrides"):  # e.g. train's --paddlerec-config
        overrides = module.expand_overrides(args, overrides)
    if args.config_file:  # a pod's (or the pipeline's) resolved config: no Hydra run
        import logging

        from recrunner.config.compose import load_resolved

        cfg = load_resolved(args.config_file, overrides)
        refuse_inline_credentials(cfg)
        if hasattr(module, "check"):
            module.check(cfg)
        # Hydra's job logging format, on stderr: the pod's log shows what a local run shows.
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
        return module.run(cfg, args) or 0

    def check(cfg: RootConfig) -> RootConfig:
        """Fail fast with one line (typos, types, ranges, the command's own input checks)
        before Hydra creates the run directory."""
        refuse_inline_credentials(cfg)
        if hasattr(module, "check"):
            module.check(cfg)
        return cfg

    if flags and (HYDRA_REPORT_FLAGS | {"-m", "--multirun"}).isdisjoint(flags):
        check(load(overrides, unused))  # hydra.main composes it again: only with Hydra's flags

    import hydra

    from recrunner import CONF_DIR

    codes: list[int] = []

    def task(dcfg: DictConfig, typed: RootConfig | None = None) -> float | None:
        """One job; returns the command's objective (train: the export's test AUC) for the
        sweepers, None when the job failed: the optuna sweeper records a failed trial (NaN
        would crash hydra-optuna-sweeper 1.3 on optuna 2.10)."""
        cfg = None
        try:
            cfg = typed or to_typed(dcfg, unused)  # typed: run_once's, checked already
            if cmd.writes_run_dir:
                from hydra.core.hydra_config import HydraConfig

                # In a multirun sweep each job gets its own directory.
                cfg.runner.output_dir = HydraConfig.get().runtime.output_dir
            codes.append(module.run(cfg, args) or 0)
        except RecrunnerError as exc:
            print(f"recrun {name}: error: {scrub(str(exc))}", file=sys.stderr)
            codes.append(exc.exit_code)
        objective = getattr(module, "objective", None)
        # A run that missed runner.target_auc is complete: its AUC still counts.
        finished = cfg is not None and codes[-1] in (0, TargetNotReached.exit_code)
        return objective(cfg) if objective and finished else None

    hydra_args = [f"hydra.job.name={name}", *sweeper_defaults(overrides)]
    if not cmd.writes_run_dir:
        hydra_args += ["hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout",
                       # logs on stderr: stdout carries the command's output (JSON, probabilities)
                       "hydra.job_logging.handlers.console.stream=ext://sys.stderr",
                       "hydra/hydra_logging=none"]
    if not flags:
        run_once(task, [*hydra_args, *overrides], check, unused)
        return max(codes, default=0)
    from recrunner.config.schema import register_configs

    register_configs()
    # Flags last: `--info` takes an optional value and must not swallow an override.
    sys.argv = [f"recrun-{name}", *hydra_args, *overrides, *flags]
    hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")(task)()
    return max(codes, default=0)


def entry() -> None:
    """The `recrun` program (console script and `python -m recrunner`): main(), then the
    process ends without Python's teardown (recrunner.quick_exit: 0.6-0.8 CPU-s once Paddle
    is imported). main() itself stays callable in a process that goes on."""
    from recrunner.quick_exit import run_then_exit

    run_then_exit(main)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print_usage()
        sys.exit(0)
    if argv[0] == "--version":
        print(f"recrun {__version__}")
        sys.exit(0)
    name = argv[0]
    if name not in COMMANDS:
        print(f"recrun: error: unknown command {name!r} (see recrun --help)", file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(run_command(name, argv[1:]))
    except RecrunnerError as exc:
        print(f"recrun {name}: error: {scrub(str(exc))}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # outside a run (which reports where it stopped)
        print(f"recrun {name}: interrupted", file=sys.stderr)
        sys.exit(Interrupted.exit_code)
