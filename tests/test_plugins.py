"""Models from outside recrunner: the `recrunner.models` entry-point group, and what a broken
plugin says. The slow test pip-installs examples/model_plugin into a fresh venv and trains it."""

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from recrunner import models
from recrunner.errors import RecrunnerError
from tests.conftest import REPO, recrun

TINY = ["model.sparse_feature_number=1009", "dataset.synth.train_rows=2000",
        "dataset.synth.test_rows=500", "runner.epochs=1", "runner.progress=false"]


def fake_dist(root: Path, entries: str, modules: dict[str, str] | None = None) -> Path:
    """An installed distribution as importlib.metadata sees it: a dist-info with entry points."""
    info = root / "fake_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[recrunner.models]\n{entries}\n")
    for name, text in (modules or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def plugin_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for fake plugins; the model registry is re-read around the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    models._packages.cache_clear()
    yield tmp_path
    models._packages.cache_clear()


def test_bundled_models_come_from_the_zoo_package() -> None:
    assert {"wide_deep", "deepfm"} <= set(models.model_names())
    assert models.load_model_module("deepfm").__name__ == "recrunner.zoo.rank.deepfm"
    assert models.load_net_class("wide_deep").__module__ == "recrunner.zoo.rank.wide_deep.net"


def test_a_plugin_joins_the_model_group(plugin_path: Path) -> None:
    fake_dist(plugin_path, "mini = mini_model", {
        "mini_model/__init__.py": "from dataclasses import dataclass\n\n\n@dataclass\n"
                                  "class Config:\n    name: str = 'mini'\n",
        "mini_model/net.py": "class Net:\n    @staticmethod\n    def table_width(cfg):\n"
                             "        return 1\n"})
    assert "mini" in models.model_names()
    assert models.load_net_class("mini").__module__ == "mini_model.net"
    from hydra.core.config_store import ConfigStore

    from recrunner.config.compose import load

    try:
        assert load(["model=mini"]).model.name == "mini"  # a choice of Hydra's model group
    finally:
        ConfigStore.instance().repo["model"].pop("mini.yaml", None)


@pytest.mark.parametrize(("entries", "modules", "message"), [
    ("gone = no_such_plugin_pkg", {},
     r"model plugin 'gone' \(entry point recrunner.models: gone = no_such_plugin_pkg\) is "
     r"broken: importing no_such_plugin_pkg failed: ModuleNotFoundError: No module named"),
    ("named = named_pkg", {"named_pkg/__init__.py": "class Config:\n    name = 'other'\n"},
     r"model plugin 'named' .* must export Config, a dataclass whose `name` defaults to 'named'"),
    ("nonet = nonet_pkg", {"nonet_pkg/__init__.py": "class Config:\n    name = 'nonet'\n",
                           "nonet_pkg/net.py": "Net = None\n"},
     r"nonet_pkg.net must define Net, a paddle.nn.Layer with table_width\(cfg\)"),
    ("wide_deep = mine", {}, r"model plugin 'wide_deep' .* clashes with the model 'wide_deep' "
                             r"of recrunner.zoo.rank.wide_deep: rename one of them"),
    ("attr = pkg:thing", {}, r"must name a package \(with Config and net.Net\), not an attribute"),
])
def test_a_broken_plugin_is_one_line_naming_it(plugin_path: Path, entries: str,
                                                modules: dict[str, str], message: str) -> None:
    fake_dist(plugin_path, entries, modules)
    name = entries.split(" = ")[0]
    with pytest.raises(RecrunnerError, match=message) as info:
        models.load_net_class(name)
    assert "\n" not in str(info.value)


def test_recrun_reports_a_broken_plugin_in_one_line(tmp_path: Path) -> None:
    fake_dist(tmp_path, "gone = no_such_plugin_pkg")
    proc = recrun("train", "model=gone", cwd=tmp_path, env={"PYTHONPATH": f"{tmp_path}:{REPO}"})
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "model plugin 'gone'" in err[0] and "is broken" in err[0], err


def see_this_interpreters_paths(python: Path) -> None:
    """Make the venv of `python` import what this interpreter imports (recrunner, Paddle), after
    its own packages. `--system-site-packages` would not: from inside a venv it exposes the
    base interpreter's site-packages, not this venv's. addsitedir, not bare paths, so the
    .pth files there (an editable install's finder) are processed too."""
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    (Path(purelib) / "_recrunner_suite_paths.pth").write_text(
        # One line, run by site.py with exec(): a comprehension there would not see `site`.
        f"import site; list(map(site.addsitedir, {paths!r}))\n")


@pytest.mark.slow
def test_an_installed_model_package_trains(tmp_path: Path) -> None:
    """examples/model_plugin, pip-installed into a fresh venv (seeing this environment's
    packages, recrunner and Paddle included), trains as `model=tiny_lr` from an empty folder."""
    source = shutil.copytree(REPO / "examples" / "model_plugin", tmp_path / "src")  # pip
    venv = tmp_path / "venv"  # builds in the source folder: keep the clone clean
    subprocess.run([sys.executable, "-m", "venv", str(venv)],
                   check=True, capture_output=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps",
         str(source)],
        capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    # After the install: pip in the venv then sees (and touches) only the venv's packages.
    see_this_interpreters_paths(python)
    run = tmp_path / "run"
    run.mkdir()
    proc = subprocess.run([str(python), "-m", "recrunner", "train", "model=tiny_lr", *TINY],
                          cwd=run, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run / "runs" / "tiny_lr" / "summary.json").read_text())
    assert summary["epochs"] == 1 and Path(summary["export_dir"]).is_dir()
    assert 0.0 < summary["auc"] <= 1.0
