"""A PaddleRec config.yaml as recrunner overrides: `recrun train --paddlerec-config FILE`.

PaddleRec's trainers read `runner:` (older files: `dygraph:`) and `hyper_parameters:`, resolve
the data dirs against the file's own directory (`os.path.join(config_abs_dir, data_dir)`) and
take `-o section.key=value` overrides. The model is the folder the file sits in
(models/rank/<name>/config.yaml) or the file name's prefix (<name>.config.yaml), unless
`model=<name>` is given. Each key that has a counterpart becomes a Hydra override; each one
that has none is named in a warning, so nothing is dropped silently.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from recrunner.errors import RecrunnerError
from recrunner.models import load_model_module, model_names

# PaddleRec's folder names that differ from recrunner's model names.
MODEL_ALIASES = {"logistic_regression": "lr", "dcn-v2": "dcn_v2", "dcnv2": "dcn_v2"}
SECTIONS = ("runner", "dygraph", "hyper_parameters")
# runner:/dygraph: keys -> recrunner keys (values copied).
RUNNER_KEYS = {
    "epochs": "runner.epochs",
    "train_batch_size": "runner.batch_size",
    "batch_size": "runner.batch_size",  # dygraph: sections
    "infer_batch_size": "runner.eval_batch_size",
    "print_interval": "runner.log_every_steps",
    "model_save_path": "runner.output_dir",
    "seed": "runner.seed",
    "geo_step": "mode.geo_k_steps",
}
# Keys with no counterpart whose reason is known (others get a generic reason).
REASONS = {
    "train_reader_path": "recrunner reads dataset.format rows itself",
    "infer_reader_path": "recrunner reads dataset.format rows itself",
    "reader_type": "recrunner reads dataset.format rows itself",
    "pipe_command": "recrunner reads dataset.format rows itself",
    "use_auc": "recrunner always reports AUC",
    "use_xpu": "no XPU support",
    "use_npu": "no NPU support",
    "model_init_path": "start from a checkpoint with runner.resume=true in its output dir",
    "infer_load_path": "use `recrun eval --checkpoint`",
    "infer_start_epoch": "recrunner evaluates every epoch",
    "infer_end_epoch": "recrunner evaluates every epoch",
    "use_inference": "recrunner always writes the inference export",
    "save_inference_feed_varnames": "the export's inputs are dense and sparse_ids",
    "save_inference_fetch_varnames": "the export's output is the click probability",
    "use_fleet": "choose mode=collective or mode=ps",
    "thread_num": "set runner.threads",
    "model_path": "the model is chosen by name",
    "sparse_inputs_slots": "the input widths come from dataset.schema",
    "dense_input_dim": "the input widths come from dataset.schema",
    "num_field": "the input widths come from dataset.schema",
    "distributed_embedding": "mode=ps always keeps the table on the servers",
    "strategy": "choose mode.sync_mode with mode=ps",
    "num_experts": "model.low_rank is one low-rank expert, not a mixture",
}


@dataclass
class Mapped:
    """A PaddleRec file as config-group choices, key values and warnings."""

    path: Path
    choices: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def overrides(self) -> list[str]:
        return [f"{g}={c}" for g, c in self.choices.items()] + [
            f"{k}={hydra_value(v)}" for k, v in self.values.items()]

    def experiment_yaml(self) -> str:
        """The same as a file of the `experiment` group (`+experiment=<its name>`)."""
        nested: dict[str, Any] = {}
        for key, value in self.values.items():
            node = nested
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        head = [f"# @package _global_\n# Imported from {self.path} by recrun train "
                "--paddlerec-import.", "defaults:"]
        head += [f"  - override /{g}: {c}" for g, c in self.choices.items()]
        return "\n".join(head) + "\n\n" + yaml.safe_dump(nested, sort_keys=False)

    def unmapped(self, key: str, value: Any, reason: str = "") -> None:
        why = reason or REASONS.get(key.rsplit(".", 1)[-1], "recrunner has no counterpart")
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        self.warnings.append(f"{self.path}: {key}={shown} is not mapped ({why})")


def hydra_value(value: Any) -> str:
    """A Python value as Hydra override syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def read(path: Path) -> dict[str, Any]:
    """The file as a mapping; a missing file or bad YAML is one line naming file:line."""
    if not path.is_file():
        raise RecrunnerError(f"--paddlerec-config {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecrunnerError(f"{where}: YAML error: {problem}") from exc
    if not isinstance(data, dict) or not any(s in data for s in SECTIONS):
        raise RecrunnerError(f"{path}: not a PaddleRec config (no runner: or "
                             "hyper_parameters: section)")
    return data


def apply_opts(data: dict[str, Any], opts: Sequence[str], path: Path) -> None:
    """PaddleRec's `-o section.key=value` overrides (values parsed as YAML)."""
    for opt in opts:
        key, sep, text = opt.partition("=")
        parts = key.strip().split(".")
        if not sep or len(parts) < 2 or not all(parts):
            raise RecrunnerError(f"-o {opt!r}: expected section.key=value "
                                 "(e.g. runner.epochs=2)")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        node = data
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise RecrunnerError(f"-o {opt!r}: {part} in {path} is not a section")
            node = child
        node[parts[-1]] = value


def model_from(path: Path, explicit: str | None) -> str:
    """`model=<name>` if given, else the file name's prefix or its folder's name."""
    if explicit:
        return explicit
    candidates = [path.name.split(".", 1)[0], path.parent.name]
    for candidate in candidates:
        name = MODEL_ALIASES.get(candidate.lower(), candidate.lower())
        if name in model_names():
            return name
    raise RecrunnerError(
        f"{path}: cannot tell the model from its name or folder ({', '.join(candidates)}): "
        f"add model=<name>, one of: {', '.join(model_names())}")


def translate(path: Path, opts: Sequence[str], model: str | None) -> Mapped:
    data = read(path)
    apply_opts(data, opts, path)
    out = Mapped(path)
    name = model_from(path, model)
    if model is None:
        out.choices["model"] = name
    model_fields = {f.name for f in fields(load_model_module(name).Config)} - {"name"}
    for section, body in data.items():
        if section in ("runner", "dygraph") and isinstance(body, dict):
            map_runner(out, section, body, path.parent.resolve())
        elif section == "hyper_parameters" and isinstance(body, dict):
            map_hyper(out, body, model_fields, name)
        elif section != "workspace":
            out.unmapped(section, "...", "recrunner has no such section")
    return out


def map_runner(out: Mapped, section: str, body: dict[str, Any], base: Path) -> None:
    for key, value in body.items():
        full = f"{section}.{key}"
        if key in ("train_data_dir", "test_data_dir"):
            # As PaddleRec: relative to the config file's folder; its files are slot rows.
            out.choices["dataset"] = "paddlerec_slot"
            target = "dataset.train" if key == "train_data_dir" else "dataset.test"
            out.values[target] = str((base / str(value)).resolve())
        elif key in RUNNER_KEYS and value is not None:
            out.values[RUNNER_KEYS[key]] = value
        elif key == "use_gpu":
            if value:  # GPUs exist only in the cluster's pods
                out.values["cluster.resources.worker.gpus"] = 1
                out.warnings.append(f"{out.path}: {full}=True sets cluster.resources.worker."
                                    "gpus=1 (per pod with cluster=k8s); on this machine "
                                    "training uses the CPU")
        elif key == "sync_mode" and value in ("async", "sync", "geo"):
            out.choices["mode"] = "ps"
            out.values["mode.sync_mode"] = value
        else:
            out.unmapped(full, value)


def map_hyper(out: Mapped, body: dict[str, Any], model_fields: set[str], name: str) -> None:
    for key, value in body.items():
        full = f"hyper_parameters.{key}"
        if key == "optimizer" and isinstance(value, dict):
            for opt_key, opt_value in value.items():
                if opt_key == "learning_rate":
                    out.values["runner.learning_rate"] = opt_value
                elif opt_key == "class" and str(opt_value).lower() == "adam":
                    pass  # recrunner's optimizer
                elif opt_key == "class":
                    out.unmapped(f"{full}.class", opt_value, "recrunner trains with Adam")
                else:
                    out.unmapped(f"{full}.{opt_key}", opt_value)
        elif key in model_fields:
            out.values[f"model.{key}"] = value
        elif key == "is_Stacked" and "structure" in model_fields:
            out.values["model.structure"] = "stacked" if value else "parallel"
        elif key == "use_low_rank_mixture" and "low_rank" in model_fields:
            if value:
                out.values["model.low_rank"] = body.get("low_rank", 32)
                out.warnings.append(f"{out.path}: {full}=True: one low-rank cross per layer "
                                    "(model.low_rank), not a mixture of experts")
            else:
                out.values["model.low_rank"] = 0
        elif key == "low_rank" and "low_rank" in model_fields:
            pass  # with use_low_rank_mixture
        elif key in ("sparse_feature_dim", "fc_sizes"):
            out.unmapped(full, value, f"model {name} has no such key")
        else:
            out.unmapped(full, value)
