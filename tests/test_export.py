"""The export and its self-check: paddle.inference's in-place mis-compilation (a tiny
reproducer), every engine equal to the trained network for both models, and exports, loaders and
the server refusing an engine that is not."""

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recrunner import manifest
from recrunner.config.compose import load
from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError
from recrunner.export import (
    META_FILE,
    PROBE_FILE,
    ExportCheckError,
    engines,
    load_export,
    save_export,
)
from recrunner.export.check import TOLERANCE, Probe, probe_inputs
from tests.conftest import REPO, SMALL_MODEL, data_overrides, recrun

pytestmark = pytest.mark.slow


def square_and_matmul() -> Any:  # a paddle.nn.Layer
    """h = x @ w read by square (a plain CPU kernel, made in-place) and by a second matmul (a
    oneDNN kernel): with Paddle 3.0's PIR inplace_pass, square overwrites h first."""
    import paddle

    class Net(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.w = self.create_parameter([4, 4])

        def forward(self, x: paddle.Tensor) -> paddle.Tensor:
            h = paddle.matmul(x, self.w)
            return paddle.square(h) + paddle.matmul(h, self.w)

    return Net()


def test_paddle_inference_inplace_pass_miscompiles_a_tiny_network(tmp_path, monkeypatch) -> None:
    import paddle
    from paddle.static import InputSpec

    paddle.seed(0)
    net = square_and_matmul()
    net.eval()
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    expected = net(paddle.to_tensor(x)).numpy().reshape(-1)
    paddle.jit.save(net, str(tmp_path / engines.MODEL_PREFIX),
                    input_spec=[InputSpec([None, 4], "float32", "x")])

    def run() -> np.ndarray:
        return engines.paddle_predict(engines.paddle_predictor(tmp_path, 1), ["x"])(x)

    assert np.abs(run() - expected).max() < TOLERANCE  # the fix: no inplace_pass
    monkeypatch.setattr(engines, "BROKEN_PASSES", ())
    # If this starts to pass, Paddle fixed the pass and BROKEN_PASSES can go.
    assert np.abs(run() - expected).max() > 0.1


def test_probe_inputs_follow_the_spec() -> None:
    from recrunner.train.build import dataset_schema

    pre = dataset_schema(load(["model.sparse_feature_number=101"]))  # the Criteo schema
    spec = [{"name": "dense", "dtype": "float32", "shape": [-1, 13]},
            {"name": "ids", "dtype": "int64", "shape": [-1, 5]}]
    dense, ids = probe_inputs(spec, pre, rows=50)
    assert dense.shape == (50, 13) and dense.dtype == np.float32
    assert ids.shape == (50, 5) and ids.dtype == np.int64
    assert ids.min() == 0 and ids.max() == 100  # the whole id range, ends included
    assert np.isfinite(dense).all() and dense.min() == 0 and 2 < dense.max() < 20  # log1p counts
    np.testing.assert_array_equal(probe_inputs(spec, pre, rows=50)[1], ids)  # deterministic


def test_onnx_cache_dir_is_the_same_in_every_process(tmp_path) -> None:
    code = ("import sys; from pathlib import Path; from recrunner.export import engines; "
            "print(engines._onnx_folders(Path(sys.argv[1]))[1])")
    dirs = {subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout for _ in range(2)}
    assert len(dirs) == 1 and "recrun-onnx-" in dirs.pop()


@dataclass
class Run:
    cfg: RootConfig
    net: object
    out: Path

    @property
    def export(self) -> Path:
        return self.out / "export"


@pytest.fixture(scope="module", params=["wide_deep", "deepfm"])
def run(request, tmp_path_factory, synth_data) -> Run:
    from recrunner.data.reader import Shard
    from recrunner.train.driver import RunDriver
    from recrunner.train.dygraph import DygraphEngine
    from recrunner.train.group import LocalGroup
    from recrunner.train.reading import Reader

    out = tmp_path_factory.mktemp(request.param)
    cfg = load([f"model={request.param}", *SMALL_MODEL, *data_overrides(synth_data),
                "runner.epochs=1", f"runner.output_dir={out}"])
    group, reader = LocalGroup(), Reader(cfg, Shard())
    engine = DygraphEngine(cfg, group, reader)
    RunDriver(cfg, engine, group, reader).run()
    return Run(cfg, engine.net, out)


def test_every_engine_equals_the_trained_network(run: Run) -> None:
    from recrunner.data.errors import RowErrors
    from recrunner.data.reader import iter_examples, rebatch
    from recrunner.train.build import dataset_schema, net_predictor

    meta = json.loads((run.export / META_FILE).read_text())
    assert meta["model"] == run.cfg.model.name
    assert set(meta["check"]["engines"]) == {"paddle", "onnx"}
    assert all(r["ok"] and r["max_abs_diff"] <= TOLERANCE
               for r in meta["check"]["engines"].values())
    batch = next(rebatch(iter_examples(run.cfg.dataset, run.cfg.dataset.test,
                                       dataset_schema(run.cfg), RowErrors()), 2000))
    run.net.eval()  # type: ignore[attr-defined]
    dygraph = net_predictor(run.net)(batch)
    names = ["dense", "sparse_ids"]
    for engine in engines.ENGINES:
        fn = engines.make_predict(engine, run.export, 1, names)
        np.testing.assert_allclose(fn(batch.dense, batch.sparse), dygraph, atol=TOLERANCE,
                                   rtol=0, err_msg=engine)
    assert dygraph.std() > 0.01


def test_eval_of_the_export_equals_eval_of_the_checkpoint(run: Run, capsys) -> None:
    from recrunner.commands import eval as eval_cmd
    from recrunner.train import checkpoint

    latest = checkpoint.latest(run.out)
    assert latest is not None
    results = []
    for source in ({"export": str(run.export), "checkpoint": None},
                   {"export": None, "checkpoint": str(latest.path)}):
        assert eval_cmd.run(run.cfg, argparse.Namespace(**source)) == 0
        results.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    exported, ckpt = results
    assert exported["eval_examples"] == ckpt["eval_examples"] == 5000
    for key in ("auc", "logloss", "mean_pred"):
        assert exported[key] == pytest.approx(ckpt[key], abs=1e-5), key


def test_an_engine_that_disagrees_fails_the_export(run: Run, tmp_path, monkeypatch) -> None:
    pre = load_export(run.export).schema
    onnx_predict = engines.onnx_predict

    def off_by_1e3(*args: Any) -> engines.PredictFn:
        fn = onnx_predict(*args)
        return lambda *arrays: fn(*arrays) + 1e-3

    monkeypatch.setattr(engines, "onnx_predict", off_by_1e3)
    target = tmp_path / "export"
    with pytest.raises(ExportCheckError, match=r"ONNX Runtime differs from the trained network "
                                               r"by 0\.001") as err:
        save_export(run.net, target, pre, run.cfg.model.name)
    assert "\n" not in str(err.value) and "paddle.inference" not in str(err.value)
    assert not target.exists() and list(tmp_path.iterdir()) == []  # nothing that looks valid


def with_miscompiled_ops(inner: Any) -> Any:  # Layer -> Layer
    """`inner` (a trained Net) followed by the op pattern paddle.inference's inplace_pass
    mis-compiles (a oneDNN matmul's output squared in place, then read again)."""
    import paddle

    class Net(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner
            self.w = self.create_parameter([1, 4])
            self.v = self.create_parameter([4, 4])

        def forward(self, dense: paddle.Tensor, sparse_ids: paddle.Tensor) -> paddle.Tensor:
            h = paddle.matmul(self.inner(dense, sparse_ids), self.w)
            return paddle.sum(paddle.square(h) + paddle.matmul(h, self.v), axis=1, keepdim=True)

    return Net()


def test_an_export_the_broken_pass_miscompiles_is_refused(run: Run, tmp_path,
                                                          monkeypatch) -> None:
    """The original DeepFM bug end to end: paddle.inference with its inplace_pass mis-computes
    such a network, and the self-check (writing, loading, serving) catches it."""
    import paddle

    paddle.seed(1)
    net = with_miscompiled_ops(run.net)
    schema = load_export(run.export).schema
    good = save_export(net, tmp_path / "good", schema, run.cfg.model.name)  # with the fix
    monkeypatch.setattr(engines, "BROKEN_PASSES", ())
    with pytest.raises(ExportCheckError, match="paddle.inference differs from the trained"):
        load_export(good)  # the verified export, in the broken engine
    with pytest.raises(ExportCheckError, match="paddle.inference differs from the trained"):
        save_export(net, tmp_path / "export", schema, run.cfg.model.name)
    assert not (tmp_path / "export").exists()
    # An export from before the self-check (no probe): the engines disagree, so none is trusted.
    old = Path(shutil.copytree(good, tmp_path / "old"))
    (old / PROBE_FILE).unlink()
    _edit_meta(old, lambda meta: meta.pop("files"))  # such exports had no checksums either
    from recrunner.serving.engine import load_engine

    with pytest.raises(ExportCheckError, match="disagree"):
        load_engine(old, "auto", 1, 1)


def _corrupt_probe(export: Path, target: Path) -> Path:
    shutil.copytree(export, target)
    names = ["dense", "sparse_ids"]
    probe = Probe.load(target / PROBE_FILE, names)
    Probe(probe.inputs, probe.expected + 1e-3).save(target / PROBE_FILE, names)
    # A probe that disagrees, vouched for by export.json: the self-check must catch it, not the
    # checksum (which would catch a damaged file).
    _edit_meta(target, lambda meta: meta["files"].update(
        manifest.describe(target, [PROBE_FILE])))
    return target


def _edit_meta(export: Path, edit: Callable[[dict], Any]) -> None:
    meta = json.loads((export / META_FILE).read_text())
    edit(meta)
    (export / META_FILE).write_text(json.dumps(meta))


def test_loaders_and_the_server_refuse_an_export_whose_probe_fails(run: Run, tmp_path) -> None:
    from recrunner.serving.engine import load_engine

    assert load_engine(run.export, "auto", 1, 2).name == "onnx"
    assert load_engine(run.export, "paddle", 1, 2).name == "paddle"
    bad = _corrupt_probe(run.export, tmp_path / "export")
    for engine in ("auto", "paddle", "onnx"):
        with pytest.raises(ExportCheckError, match="refusing .*differs from the trained network"):
            load_engine(bad, engine, 1, 1)
    with pytest.raises(RecrunnerError, match="paddle.inference differs"):
        load_export(bad)  # recrun eval / recrun predict
    # An older export without a probe (nor checksums) still loads: engine against engine.
    (bad / PROBE_FILE).unlink()
    _edit_meta(bad, lambda meta: meta.pop("files"))
    assert load_engine(bad, "auto", 1, 1).name == "onnx"
    assert load_export(bad).probe is None


def test_recrun_serve_refuses_to_start_on_a_failing_probe(run: Run, tmp_path) -> None:
    if run.cfg.model.name != "wide_deep":
        pytest.skip("one model is enough for the CLI")
    bad = _corrupt_probe(run.export, tmp_path / "export")
    result = recrun("serve", f"serving.model_dir={bad}", "serving.port=0", timeout=120)
    assert result.returncode == 1
    errors = [ln for ln in result.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "refusing" in errors[0] and "differs" in errors[0], result.stderr


def test_recrun_train_fails_with_one_line_when_the_export_check_fails(run: Run, capsys,
                                                                      monkeypatch) -> None:
    """Resuming a finished run only re-exports: with an engine off by 1e-3, `recrun train`
    exits 2 with the check's line, and the verified export from before stays untouched."""
    if run.cfg.model.name != "wide_deep":
        pytest.skip("one model is enough for the CLI")
    from recrunner import cli

    before = (run.export / META_FILE).read_text()
    paddle_predict = engines.paddle_predict
    monkeypatch.setattr(engines, "paddle_predict",
                        lambda *a: (lambda fn: lambda *x: fn(*x) + 1e-3)(paddle_predict(*a)))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "+mode=local", f"runner.output_dir={run.out}", *SMALL_MODEL,
                  f"dataset.train={run.cfg.dataset.train}", f"dataset.test={run.cfg.dataset.test}",
                  "runner.epochs=1", "runner.resume=true"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("recrun train: error: export check failed, nothing exported to")
    assert "paddle.inference differs from the trained network by 0.001" in err[-1]
    assert "Traceback" not in "\n".join(err)
    assert (run.export / META_FILE).read_text() == before
    from recrunner.atomic import TEMP

    assert not [p for p in run.export.parent.iterdir() if TEMP.match(p.name)]  # no temp left


# Run in a fresh process: the zoo's tracing is marked for the process by the first export.
CONVERTED_VS_TRACED = r'''
import sys
from pathlib import Path

import paddle
import paddle.nn.functional as F
from paddle.static import InputSpec

from recrunner.config.compose import load
from recrunner.export import save_export
from recrunner.models import model_names
from recrunner.train.build import build_net, dataset_schema

out = Path(sys.argv[1])
nets = {}
for name in model_names():
    cfg = load([f"model={name}"])
    nets[name] = (build_net(cfg), dataset_schema(cfg))


class WithProbability(paddle.nn.Layer):  # save_export's wrapper, as dy2static converts it
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, dense, sparse_ids):
        return F.sigmoid(self.inner(dense, sparse_ids))


for name, (net, schema) in nets.items():  # every conversion before the first save_export
    net.eval()
    paddle.jit.save(WithProbability(net), str(out / name / "converted" / "model"), input_spec=[
        InputSpec([None, schema.num_dense], "float32", "dense"),
        InputSpec([None, schema.sparse_width], "int64", "sparse_ids")])
saved = []  # the layers save_export hands to jit.save: its sigmoid wrapper
jit_save = paddle.jit.save
paddle.jit.save = lambda layer, *args, **kwargs: (saved.append(layer),
                                                  jit_save(layer, *args, **kwargs))
for name, (net, schema) in nets.items():
    save_export(net, out / name / "traced", schema, name)
    # Traced: the export marked the zoo's layers, and its wrapper, as dy2static's
    # not_to_static does.
    from paddle.jit.dy2static.program_translator import CONVERSION_OPTIONS
    assert getattr(type(net).forward, CONVERSION_OPTIONS).not_convert, name
    assert getattr(type(saved[-1]).forward, CONVERSION_OPTIONS).not_convert, name
'''


def test_the_zoo_traced_by_export_gives_the_program_dy2static_converts(tmp_path: Path) -> None:
    """save_export traces the bundled zoo's layers (recrunner.export.write.trace_zoo_layers):
    the program written is the one dy2static's source conversion writes."""
    from recrunner.models import model_names

    script = tmp_path / "convert_then_trace.py"
    script.write_text(CONVERTED_VS_TRACED)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    def program(path: Path) -> str:
        # Each op's struct_name ("/Net_6/IdTable/") counts the layers this process has built
        # so far, not how the program was made: blanked.
        return re.sub(r'"D":"[^"]*"\},"N":"struct_name"', '"D":""},"N":"struct_name"',
                      path.read_text())

    for name in model_names():
        converted = program(tmp_path / name / "converted" / "model.json")
        assert program(tmp_path / name / "traced" / "model.json") == converted, name
