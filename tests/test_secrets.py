"""Credentials never reach what a run prints or writes: a real `recrun train` with
recognisable fake credentials in its environment (the variables recrunner reads, JUICEFS_*,
and those its libraries read: AWS_* for s3:// data through fsspec/s3fs, MLFLOW_TRACKING_* for
logger=mlflow) leaves none of them in stdout, stderr, `.hydra/` or any file of the run
directory; a credential typed into an override is refused or redacted, never echoed.
(`recrun status`/`logs`, the ConfigMap and the API's errors: tests/test_k8s_apply.py and
tests/test_k8s_render.py.)"""

import json
import sys
from pathlib import Path

import pytest

from recrunner.redact import REDACTED, scrub, scrub_stream
from tests.conftest import SMALL_MODEL, data_overrides, recrun

# Each value is one no file or output can hold by chance. (Not MLFLOW_TRACKING_USERNAME: a
# name, not a credential; a fleet job's logs/ may show it.)
FAKE = {
    "JUICEFS_METAURL": "redis://jfs:Fake-Meta-Pass-7Q2@10.9.8.7:6379/3",
    "JUICEFS_ACCESS_KEY": "FAKE-JFS-ACCESS-KEY-41X",
    "JUICEFS_SECRET_KEY": "fake-jfs-secret-key-9Zk3",
    "AWS_ACCESS_KEY_ID": "AKIAFAKEFAKE0000TEST",
    "AWS_SECRET_ACCESS_KEY": "fake/aws+secret/Key0123456789abcdefTEST",
    "AWS_SESSION_TOKEN": "FakeAwsSessionToken//0123==",
    "MLFLOW_TRACKING_PASSWORD": "fake-mlflow-Passw0rd-88",
    "MLFLOW_TRACKING_TOKEN": "fake-mlflow-token-c0ffee",
}


def leaks(text: str | bytes) -> list[str]:
    data = text.encode() if isinstance(text, str) else text
    return [name for name, value in FAKE.items() if value.encode() in data]


def test_a_stream_is_scrubbed_wherever_its_chunks_split() -> None:
    values = [FAKE["JUICEFS_METAURL"], FAKE["JUICEFS_SECRET_KEY"], "Fake-Meta"]  # one inside
    key = FAKE["JUICEFS_SECRET_KEY"]
    text = f"a {FAKE['JUICEFS_METAURL']} b {key}{key} Fake-Meta end"
    whole = scrub(text, values)
    assert whole.count(REDACTED) == 4 and not leaks(whole)
    for i in range(len(text) + 1):
        assert "".join(scrub_stream([text[:i], text[i:]], values)) == whole, i
    assert "".join(scrub_stream(text, values)) == whole  # one character a chunk
    assert list(scrub_stream(["no", " secret"], [])) == ["no", " secret"]


def test_a_fleet_job_gets_its_credentials_outside_the_environment_paddle_logs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """paddle.distributed.launch writes each worker's environment into the run's logs/: the
    launcher hands the credentials over in a private file instead (the fleet jobs of
    tests/test_crash_fleet.py check their run directories for the values)."""
    import os
    import stat
    import subprocess

    from recrunner.fleet import secret_env

    env = {**os.environ, **FAKE, "PLAIN_SETTING": "kept"}
    with secret_env.handed_over(env) as given:
        path = Path(given[secret_env.ENV])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert given["PLAIN_SETTING"] == "kept" and leaks("\n".join(given.values())) == []
        child = subprocess.run(
            [sys.executable, "-c", "import json, os; from recrunner.fleet import secret_env; "
             "secret_env.restore(); print(json.dumps(dict(os.environ)))"],
            env=given, capture_output=True, text=True, check=True)
        restored = json.loads(child.stdout)
        assert {k: restored.get(k) for k in FAKE} == FAKE
        assert secret_env.ENV not in restored
    assert not path.exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, small_synth: dict[str, str]
            ) -> tuple[Path, object]:
    """One epoch on 4k rows with the fake credentials in the environment, logged to
    TensorBoard. (Not MLflow: its SQLite store's set-up doubles the run's 30 s here; its client
    sends MLFLOW_TRACKING_* only to a remote tracking server, which a test cannot have.)"""
    out = tmp_path_factory.mktemp("secrets") / "run"
    done = recrun("train", "+mode=local", f"runner.output_dir={out}", *SMALL_MODEL,
                  *data_overrides(small_synth), "runner.epochs=1", "logger=tensorboard",
                  env=FAKE)
    return out, done


@pytest.mark.slow
def test_no_credential_reaches_the_output_or_the_run_directory(
        trained: tuple[Path, object]) -> None:
    out, done = trained
    assert done.returncode == 0, done.stderr[-3000:]  # type: ignore[attr-defined]
    assert leaks(done.stdout) == [] and leaks(done.stderr) == []  # type: ignore[attr-defined]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert (out / ".hydra" / "config.yaml") in files and (out / "train.log") in files
    assert (out / "export" / "model.pdiparams") in files
    assert {str(p.relative_to(out)): leaks(p.read_bytes()) for p in files
            if leaks(p.read_bytes())} == {}


@pytest.mark.parametrize("override, expect", [
    # a password in a URL: refused, naming the key
    ("logger.mlflow.tracking_uri=https://me:" + FAKE["MLFLOW_TRACKING_PASSWORD"]
     + "@mlflow.example.com", "logger.mlflow.tracking_uri holds a credential"),
    # a variable named like a credential in the container's plain environment: refused
    ("+cluster.env.AWS_SECRET_ACCESS_KEY=" + FAKE["AWS_SECRET_ACCESS_KEY"],
     "cluster.env.AWS_SECRET_ACCESS_KEY holds a credential"),
    # a known credential pasted into the wrong key: the type error shows it redacted
    ("runner.epochs=" + FAKE["JUICEFS_SECRET_KEY"], f"runner.epochs={REDACTED}"),
    ("runner.epochs=" + FAKE["AWS_SECRET_ACCESS_KEY"], f"runner.epochs={REDACTED}"),
    ("runner.seed=" + FAKE["MLFLOW_TRACKING_PASSWORD"], f"runner.seed={REDACTED}"),
])
def test_a_credential_in_an_override_is_never_echoed(
        tmp_path: Path, small_synth: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture, override: str, expect: str) -> None:
    """`recrun train`'s entry point in this process (the override is refused before Hydra,
    as in a fresh one: a subprocess would cost 5 s of imports a case)."""
    from recrunner.cli import main

    for name, value in FAKE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    with pytest.raises(SystemExit) as exit_:
        main(["train", "+mode=local", f"runner.output_dir={tmp_path / 'run'}", "logger=mlflow",
              *data_overrides(small_synth), override])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert exit_.value.code == 2 and len(lines) == 1, err[-2000:]
    assert lines[0].startswith("recrun train: error: ") and expect in lines[0], lines[0]
    assert leaks(out + err) == []
    assert not (tmp_path / "run").exists()  # refused before Hydra made the run directory
