"""PaddleRec config.yaml files run as they are: keys mapped, the rest named, bad files one line;
the experiment presets compose."""

import json
import shutil
from pathlib import Path

import pytest

from recrunner.cli import main
from recrunner.config.compose import load
from recrunner.config.paddlerec import translate
from recrunner.errors import RecrunnerError
from tests.conftest import recrun, shared_file

DCN = """\
runner:
  train_data_dir: "../../../data/train"
  test_data_dir: "data/test"
  use_gpu: True
  train_batch_size: 64
  epochs: 2
  model_save_path: "out"
  train_reader_path: "reader"
hyper_parameters:
  optimizer:
    class: Adam
    learning_rate: 0.0005
    strategy: async
  sparse_feature_number: 10007
  sparse_feature_dim: 8
  fc_sizes: [16, 8]
  is_Stacked: False
  cross_num: 3
  l2_reg_cross: 0.00003
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_keys_map_and_the_rest_are_named(tmp_path: Path) -> None:
    path = write(tmp_path / "models/rank/dcn_v2/config.yaml", DCN)
    mapped = translate(path, ["runner.epochs=1", "hyper_parameters.fc_sizes=[32, 4]"], None)
    cfg = load(mapped.overrides())
    assert (cfg.model.name, cfg.dataset.name, cfg.dataset.format) == ("dcn_v2",
                                                                       "paddlerec_slot", "slot")
    # Data dirs relative to the file, as PaddleRec joins them to the config's folder.
    assert cfg.dataset.train == str(tmp_path / "data/train")
    assert cfg.dataset.test == str(path.parent / "data/test")
    assert (cfg.runner.epochs, cfg.runner.batch_size, cfg.runner.learning_rate) == (1, 64, 5e-4)
    assert cfg.runner.output_dir == "out"
    assert (cfg.model.sparse_feature_number, cfg.model.sparse_feature_dim) == (10007, 8)
    assert (cfg.model.fc_sizes, cfg.model.cross_num, cfg.model.structure) == ([32, 4], 3,
                                                                               "parallel")
    assert cfg.cluster.resources.worker.gpus == 1
    named = [w.split(": ", 1)[1].split("=")[0] for w in mapped.warnings]
    assert named == ["runner.use_gpu", "runner.train_reader_path",
                     "hyper_parameters.optimizer.strategy", "hyper_parameters.l2_reg_cross"]


def test_a_key_the_model_lacks_is_named_and_model_override_wins(tmp_path: Path) -> None:
    path = write(tmp_path / "wide_deep.config.yaml", DCN)
    mapped = translate(path, [], "lr")
    assert "model" not in mapped.choices
    cfg = load([*mapped.overrides(), "model=lr"])
    assert cfg.model.name == "lr" and cfg.model.sparse_feature_number == 10007
    assert any("hyper_parameters.sparse_feature_dim=8 is not mapped (model lr has no such key)"
               in w for w in mapped.warnings)
    assert translate(path, [], None).choices["model"] == "wide_deep"  # the file name's prefix


@pytest.mark.parametrize(("name", "text", "opts", "message"), [
    ("absent.yaml", None, [], r"absent.yaml: no such file"),
    ("dnn/config.yaml", "runner:\n  epochs: [1\n  x: 2\n", [], r"config.yaml:3: YAML error"),
    ("foo/config.yaml", DCN, [], r"cannot tell the model .* \(config, foo\): add model="),
    ("dnn/config.yaml", "epochs: 2\n", [], r"not a PaddleRec config"),
    ("dnn/config.yaml", DCN, ["epochs"], r"-o 'epochs': expected section.key=value"),
])
def test_bad_files_are_one_line(tmp_path: Path, name: str, text: str | None,
                                opts: list[str], message: str) -> None:
    path = tmp_path / name
    if text is not None:
        write(path, text)
    with pytest.raises(RecrunnerError, match=message) as err:
        translate(path, opts, None)
    assert "\n" not in str(err.value)


def test_cli_errors_exit_non_zero_with_one_line(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--paddlerec-config", str(tmp_path / "nope.yaml")])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "\n" not in err and err.endswith("nope.yaml: no such file")
    with pytest.raises(SystemExit) as exit_:
        main(["train", "-o", "runner.epochs=1"])
    assert exit_.value.code == 2 and "need --paddlerec-config" in capsys.readouterr().err


def test_import_writes_an_experiment_that_composes_to_the_same_config(tmp_path: Path,
                                                                       capsys) -> None:
    path = write(tmp_path / "dcn_v2/config.yaml", DCN)
    out = tmp_path / "conf/experiment/mine.yaml"
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--paddlerec-config", str(path), "-o", "runner.epochs=3",
              "--paddlerec-import", str(out)])
    assert exit_.value.code == 0 and "+experiment=mine" in capsys.readouterr().out
    direct = load(translate(path, ["runner.epochs=3"], None).overrides())
    imported = load(["+experiment=mine", f"hydra.searchpath=[file://{tmp_path / 'conf'}]"])
    assert imported == direct


def test_experiment_presets_compose() -> None:
    cfg = load(["+experiment=criteo_dcn_v2", "dataset.train=a", "dataset.test=b"])
    assert (cfg.model.name, cfg.dataset.name, cfg.model.sparse_feature_dim) == ("dcn_v2",
                                                                                "criteo", 40)
    assert load(["experiment=criteo_lr", "dataset.train=a", "dataset.test=b"]).model.name == "lr"
    with pytest.raises(RecrunnerError, match="one of: criteo_dcn_v2"):
        load(["+experiment=criteo_dcn"])


@pytest.mark.slow
def test_paddlerecs_own_wide_deep_config_trains(tmp_path: Path) -> None:
    """PaddleRec's models/rank/wide_deep/config.yaml beside its sample data, as it is."""
    config = shared_file("k8s/examples/paddlerec/wide_deep.config.yaml")
    sample = shared_file("data/paddlerec_wide_deep_sample_train.txt")
    shutil.copy(config, tmp_path / "wide_deep.config.yaml")
    (tmp_path / "data/sample_data/train").mkdir(parents=True)
    shutil.copy(sample, tmp_path / "data/sample_data/train/part-0")
    proc = recrun("train", "--paddlerec-config", "wide_deep.config.yaml", "-o",
                  "runner.epochs=1", "runner.progress=false", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "runner.use_auc=True is not mapped" in proc.stderr
    summary = json.loads((tmp_path / "output_model_wide_deep/summary.json").read_text())
    assert (summary["epochs"], summary["train_examples"]) == (1, 80)
    assert (tmp_path / "output_model_wide_deep/export/export.json").exists()
