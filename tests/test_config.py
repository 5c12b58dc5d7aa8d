"""The config tree is the user interface: overrides, schema errors, help, sweeps."""

import json
import re

import pytest

from recrunner.config.compose import load, normalize_overrides
from recrunner.errors import RecrunnerError
from tests.conftest import SMALL_MODEL, data_overrides, recrun


def test_defaults_and_overrides_compose_typed() -> None:
    cfg = load(["runner.epochs=3", "model.sparse_feature_dim=16", "dataset.format=slot"])
    assert cfg.runner.epochs == 3
    assert cfg.model.sparse_feature_dim == 16
    assert cfg.dataset.format == "slot"
    assert cfg.model.name == "wide_deep" and cfg.mode.name == "local"


@pytest.mark.parametrize("override", ["+mode=local", "mode=local", "+cluster=local",
                                      "cluster=local", "+dataset=criteo", "dataset=criteo"])
def test_both_group_spellings_work(override: str) -> None:
    cfg = load([override, "dataset.train=a", "dataset.test=b"])
    group, option = override.lstrip("+").split("=")
    assert getattr(cfg, group).name == option


def test_plus_kept_for_non_groups() -> None:
    assert normalize_overrides(["+mode=ps", "+foo.bar=1", "++x=2"]) == ["mode=ps", "+foo.bar=1",
                                                                       "++x=2"]


@pytest.mark.parametrize("override,needle", [
    ("runner.epoch=3", "runner.epoch"),
    ("runner.epochs=three", "runner.epochs"),
    ("model.sparse_feature_dim=x", "model.sparse_feature_dim"),
    ("dataset.format=parquet", "dataset.format"),
    ("dataset.on_error=ignore", "dataset.on_error"),
    ("mode=nonexistent", "mode/nonexistent"),
])
def test_config_errors_name_the_key(override: str, needle: str) -> None:
    with pytest.raises(RecrunnerError) as err:
        load([override])
    assert needle in str(err.value)


def test_missing_mandatory_value() -> None:
    with pytest.raises(RecrunnerError, match="dataset.train"):
        load(["dataset=criteo"])


def test_a_dataset_path_the_command_does_not_read_may_stay_unset() -> None:
    """predict and serve read no dataset file, eval only dataset.test (their DATASET_PATHS):
    dataset=criteo|avazu's `???` for the others load as "" there; a read one still fails."""
    from recrunner.commands import eval as evaluate
    from recrunner.commands import predict, serve, train
    from recrunner.config.compose import DATASET_PATHS

    def unused(module: object) -> list[str]:
        return [k for k in DATASET_PATHS if k not in getattr(module, "DATASET_PATHS",
                                                               DATASET_PATHS)]

    assert unused(predict) == unused(serve) == ["train", "test"]
    assert unused(evaluate) == ["train"] and unused(train) == []
    cfg = load(["dataset=avazu"], unused(predict))
    assert (cfg.dataset.train, cfg.dataset.test) == ("", "")
    assert cfg.dataset.schema.name == "avazu"
    assert load(["dataset=avazu", "dataset.test=t.csv"], unused(evaluate)).dataset.test == "t.csv"
    with pytest.raises(RecrunnerError, match=r"missing mandatory value: test \(full_key: "
                                             r"dataset.test\)"):
        load(["dataset=avazu"], unused(evaluate))
    # Given paths are kept as given.
    assert load(["dataset=avazu", "dataset.train=a", "dataset.test=b"],
                unused(predict)).dataset.train == "a"


def test_train_without_dataset_train_is_a_one_line_error() -> None:
    result = recrun("train", "dataset=avazu", "dataset.test=t.csv")
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "missing mandatory value: train (full_key: dataset.train)" in lines[0]


def test_cli_config_error_is_one_line_nonzero() -> None:
    result = recrun("train", "runner.epochz=1")
    assert result.returncode == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "runner.epochz" in lines[0], result.stderr


@pytest.mark.parametrize("override, message", [
    ("+runner.epochz=3", "runner.epochz is not a key of RunnerConfig"),
    ("+model.fc_size=[8]", "model.fc_size is not a key of Config"),
    ("+dataset.schema.file.delimeter=tab", "dataset.schema.file.delimeter is not a key of"),
    ("+cluster.juicefs.bucketz=x", "cluster.juicefs.bucketz is not a key of JuiceFSConfig"),
])
def test_a_key_appended_with_plus_is_checked_against_the_schema(override: str,
                                                                message: str) -> None:
    """Hydra appends `+key=value` to a structured config; the dataclasses would drop it
    silently and train without the setting the user meant."""
    with pytest.raises(RecrunnerError, match=message):
        load([override])
    # A mapping's keys are the user's to add.
    cfg = load(["+cluster.env.MY_SETTING=1", "+dataset.sampleset.node_affinity.disk=[ssd]"])
    assert cfg.cluster.env == {"MY_SETTING": "1"}


def test_cli_help_lists_subcommands_and_groups() -> None:
    top = recrun("--help")
    assert top.returncode == 0
    for name in ("train", "eval", "predict", "data"):
        assert f"  {name}" in top.stdout
    sub = recrun("train", "--help")
    assert sub.returncode == 0
    assert "dataset" in sub.stdout and "synth" in sub.stdout and "runner.epochs = 2" in sub.stdout


def test_cfg_job_prints_resolved_config_with_overrides() -> None:
    result = recrun("train", "--cfg", "job", "+mode=local", "runner.batch_size=128")
    assert result.returncode == 0, result.stderr
    assert "batch_size: 128" in result.stdout and "sparse_feature_number: 1000001" in result.stdout


def test_config_file_round_trip(tmp_path) -> None:
    printed = recrun("train", "--cfg", "job", "runner.seed=99").stdout
    path = tmp_path / "config.yaml"
    path.write_text(printed)
    from recrunner.config.compose import load_resolved

    cfg = load_resolved(path, ["runner.epochs=4"])
    assert cfg.runner.seed == 99 and cfg.runner.epochs == 4
    with pytest.raises(RecrunnerError, match="epochz"):
        load_resolved(path, ["runner.epochz=4"])


@pytest.mark.slow
def test_multirun_sweep_runs_each_job(tmp_path, small_synth) -> None:
    out = tmp_path / "sweep"
    result = recrun("train", "-m", "model.sparse_feature_dim=4,8", "runner.epochs=1",
                    f"runner.output_dir={out}",
                    *[o for o in SMALL_MODEL if "sparse_feature_dim" not in o],
                    *data_overrides(small_synth))
    assert result.returncode == 0, result.stderr[-2000:]
    dims = sorted(json.loads(p.read_text())["fingerprint"]["model"]["sparse_feature_dim"]
                  for p in out.glob("multirun/*/*/checkpoints/1/state.json"))
    assert dims == [4, 8]
    assert len(list(out.glob("multirun/*/*/export/model.pdiparams"))) == 2


@pytest.mark.parametrize("override, message", [
    ("runner.batch_size=-5", "runner.batch_size=-5 must be at least 1"),
    ("runner.epochs=0", "runner.epochs=0 must be at least 1"),
    ("runner.learning_rate=-0.1", "runner.learning_rate=-0.1 must be greater than 0"),
    ("runner.eval_steps=0", "runner.eval_steps=0 must be at least 1"),
    ("runner.target_auc=1.5", "runner.target_auc=1.5 must be between 0.0 and 1.0"),
    ("model.sparse_feature_dim=0", "model.sparse_feature_dim=0 must be at least 1"),
    ("model.sparse_feature_number=0", "model.sparse_feature_number=0 must be at least 1"),
    ("model.fc_sizes=[64,0]", "model.fc_sizes=[64, 0] must be a non-empty list"),
    ("model.init_scale=0", "model.init_scale=0.0 must be greater than 0"),
    ("mode.trainers=0", "mode.trainers=0 must be at least 1"),
    ("mode.max_restarts=-1", "mode.max_restarts=-1 must be at least 0"),
    ("serving.port=70000", "serving.port=70000 must be between 0 and 65535"),
    ("serving.workers=0", "serving.workers=0 must be at least 1"),
    ("serving.grpc_port=-1", "serving.grpc_port=-1 must be between 0 and 65535"),
    ("serving.grpc_max_concurrent_rpcs=0", "serving.grpc_max_concurrent_rpcs=0 must be at least 1"),
    ("serving.grpc_max_connection_age_s=0", "serving.grpc_max_connection_age_s=0.0 must be greater "
     "than 0"),
    ("serving.model_name='wide/deep'", "serving.model_name='wide/deep' must be a name of"),
])
def test_out_of_range_values_fail_at_load_time(override: str, message: str) -> None:
    with pytest.raises(RecrunnerError, match=re.escape(message)):
        load([override])


def test_an_out_of_range_value_stops_the_command_before_any_work(tmp_path) -> None:
    out = tmp_path / "never-written"
    proc = recrun("train", "runner.batch_size=-5", f"runner.output_dir={out}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "recrun train: error: config error: runner.batch_size=-5 must be at least 1"]
    assert not out.exists()


def test_an_unknown_group_option_lists_the_valid_ones() -> None:
    with pytest.raises(RecrunnerError, match=r"choose mode= one of: collective, local, ps"):
        load(["mode=lcoal"])


@pytest.mark.parametrize("command", ["predict", "data", "bench-serve"])
def test_help_does_not_need_the_commands_required_arguments(command: str) -> None:
    proc = recrun(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: recrun {command}") and "config groups" in proc.stdout


@pytest.mark.parametrize("flags, expected", [(["--info", "defaults"], "Defaults List"),
                                              (["--info"], "Installed Hydra Plugins"),
                                              (["-sc", "install=bash"], "hydra_bash_completion")])
def test_hydras_own_flags_pass_through(flags: list[str], expected: str) -> None:
    proc = recrun("train", *flags)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expected in proc.stdout


@pytest.mark.parametrize("overrides, message", [
    (["logger.visualdl.logdir=x"], "logger.visualdl is not chosen: add logger=visualdl"),
    (["dataset.schema.label="], "dataset.schema.label must name the label column"),
    (["runner.export=worst"], "expected one of [best, last]"),
])
def test_keys_added_this_round_refuse_wrong_values(overrides: list[str], message: str) -> None:
    with pytest.raises(RecrunnerError) as err:
        load(overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


DATA = ["dataset.train=/data/t.txt", "dataset.test=/data/e.txt"]


@pytest.mark.parametrize("overrides", [
    ["model=deepfm", "dataset=avazu", *DATA, "logger=mlflow"],
    ["mode=ps", "mode.sync_mode=geo", "model=dcn_v2"],
    ["mode=collective", "mode.elastic.max_nodes=2"],
    ["cluster=k8s", "cluster.image=r/i:1", "runner.output_dir='/tmp/ünï code'",
     "+cluster.env={A: 'yes', B: '0012', C: 'null'}"],
])
def test_the_written_config_loads_back_as_omegaconf_wrote_it(overrides: list[str],
                                                             tmp_path) -> None:
    """to_yaml (PyYAML over the dataclasses) holds the data OmegaConf's own writer held, and
    the run directory's copy loads back to the same config."""
    import yaml
    from omegaconf import OmegaConf

    from recrunner.config.compose import load_resolved, to_yaml

    cfg = load(overrides)
    written = to_yaml(cfg)
    assert yaml.safe_load(written) == yaml.safe_load(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    path = tmp_path / "config.yaml"
    path.write_text(written)
    assert load_resolved(path) == cfg


# Runs `recrun` counting Hydra's compositions of the config (each costs 0.4-0.8 s).
COUNT_COMPOSES = """
import sys
from hydra._internal import hydra
compose, count = hydra.Hydra.compose_config, []
def counted(self, *args, **kwargs):
    count.append(1)
    return compose(self, *args, **kwargs)
hydra.Hydra.compose_config = counted
from recrunner.cli import run_command
code = run_command(sys.argv[1], sys.argv[2:])
print("composed", len(count), file=sys.stderr)
sys.exit(code)
"""


def test_a_run_composes_its_config_once_and_writes_what_hydra_main_writes(tmp_path,
                                                                         small_synth) -> None:
    """A plain run is checked and run on one composition, through Hydra's own job runner;
    with a Hydra flag (`-cn config`: the same config) it goes through hydra.main, which
    composes it twice more after the checks. Both write the same run directory records."""
    import subprocess
    import sys

    from tests.conftest import REPO

    runs = {}
    for name, flags in (("once", []), ("main", ["-cn", "config"])):
        out = tmp_path / name
        proc = subprocess.run(
            [sys.executable, "-c", COUNT_COMPOSES, "train", *flags, *SMALL_MODEL,
             *data_overrides(small_synth), "runner.epochs=1", f"runner.output_dir={out}"],
            cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[name] = out, proc.stderr
    composed = {n: int(re.findall(r"composed (\d+)", runs[n][1])[-1]) for n in runs}
    assert composed["once"] == 1 and composed["main"] >= 2, composed
    for record in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        once, main = ((runs[n][0] / ".hydra" / record).read_text().replace(str(runs[n][0]), "OUT")
                      for n in ("once", "main"))
        assert once == main, record
    logs = [json.loads((runs[n][0] / "summary.json").read_text())["auc"] for n in runs]
    assert logs[0] == logs[1]  # the same run


def test_a_run_directory_that_cannot_be_written_is_a_one_line_error(tmp_path,
                                                                    small_synth) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc = recrun("train", *SMALL_MODEL, *data_overrides(small_synth),
                  f"runner.output_dir={blocker}/run")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (f"recrun train: error: runner.output_dir: cannot write "
                                   f"{blocker}/run: Not a directory")
    assert blocker.read_text() == "not a directory"
