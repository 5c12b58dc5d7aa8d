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
# name, not a credential.) The first ones are the variables recrunner and its libraries read;
# the rest, a sweep of other providers' names and shapes that no name pattern knows: the
# allow-list (recrunner/fleet/job_env.py) must keep every one of them out of a job.
FAKE = {
    "JUICEFS_METAURL": "redis://jfs:Fake-Meta-Pass-7Q2@10.9.8.7:6379/3",
    "JUICEFS_ACCESS_KEY": "FAKE-JFS-ACCESS-KEY-41X",
    "JUICEFS_SECRET_KEY": "fake-jfs-secret-key-9Zk3",
    "AWS_ACCESS_KEY_ID": "AKIAFAKEFAKE0000TEST",
    "AWS_SECRET_ACCESS_KEY": "fake/aws+secret/Key0123456789abcdefTEST",
    "AWS_SESSION_TOKEN": "FakeAwsSessionToken//0123==",
    "MLFLOW_TRACKING_PASSWORD": "fake-mlflow-Passw0rd-88",
    "MLFLOW_TRACKING_TOKEN": "fake-mlflow-token-c0ffee",
    "AZURE_STORAGE_KEY": "FakeAzureStorageKey+9x8w7v==",
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountKey=FakeAzConn55",
    "DATABASE_URL": "postgres://user:Fake-Db-Pass-314@db.example.com/db",
    "BROKER_URL": "amqp://guest:FakeBrokerPw-27@mq.example.com:5672//",
    "GITHUB_PAT": "ghp_FAKEfakeFAKEfake0123456789",
    "GITLAB_PAT": "glpat-FAKE-fake-0123",
    "HF_TOKEN": "hf_FAKEhuggingFAKE0123",
    "OPENAI_API_KEY": "sk-FAKE-openai-0123456789",
    "GOOGLE_API_KEY": "AIzaFAKEgoogleKEY012345",
    "SLACK_WEBHOOK": "https://hooks.slack.example/services/T0/B0/FakeSlackHook77",
    "SENTRY_DSN": "https://FakeSentryKey42@o1.ingest.sentry.example/1",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "FakeAliyunSecret-0123",
    "TENCENTCLOUD_SECRETKEY": "FakeTencentSecret-4567",
    "BCE_SK": "FakeBaiduCloudSk-8901",
    "DIGITALOCEAN_ACCESS_TOKEN": "dop_v1_FAKEdigitalocean01",
    "PGPASSWORD": "Fake-Pg-Password-66",
    "MYSQL_PWD": "Fake-MySql-Pwd-77",
    "WANDB_API_KEY": "FakeWandbKey0123456789",
    "STRIPE_KEY": "sk_live_FAKEstripe0123",
    "TWILIO_AUTH": "FakeTwilioAuth-0123",
    "DOCKER_AUTH_CONFIG": '{"auths":{"r.example":{"auth":"RmFrZURvY2tlckF1dGg="}}}',
    "MYAPP_SIGNING": "Fake-Opaque-Signing-Value-99",
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


def test_a_fleet_job_gets_an_allow_listed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """paddle.distributed.launch writes each worker's environment into the run's logs/: it
    gets the plain settings alone; what the job needs goes through a private file, and every
    other variable stays out (the fleet jobs of tests/test_crash_fleet.py, test_elastic.py
    and the one below check their run directories for the values)."""
    import os
    import stat
    import subprocess

    from recrunner.fleet import job_env

    env = {**os.environ, **FAKE, "OMP_NUM_THREADS": "2", "FLAGS_x": "1", "MYAPP_MODE": "fast"}
    needed = ["AWS_SECRET_ACCESS_KEY", "MYAPP_*"]
    with job_env.handed_over(env, needed) as given:
        path = Path(given[job_env.ENV])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert leaks("\n".join(f"{k}={v}" for k, v in given.items())) == []
        assert given["OMP_NUM_THREADS"] == "2" and given["FLAGS_x"] == "1"
        assert given["PATH"] == os.environ["PATH"] and "MYAPP_MODE" not in given
        assert {k for k in given if not job_env.is_plain(k)} == {job_env.ENV}
        child = subprocess.run(
            [sys.executable, "-c", "import json, os; from recrunner.fleet import job_env; "
             "job_env.restore(); print(json.dumps(dict(os.environ)))"],
            env=given, capture_output=True, text=True, check=True)
        restored = json.loads(child.stdout)
        assert {k: v for k, v in restored.items() if k in FAKE} == {
            "AWS_SECRET_ACCESS_KEY": FAKE["AWS_SECRET_ACCESS_KEY"],
            "MYAPP_SIGNING": FAKE["MYAPP_SIGNING"]}
        assert restored["MYAPP_MODE"] == "fast" and job_env.ENV not in restored
    assert not path.exists()
    with job_env.handed_over(env, []) as given:  # nothing needed: no file at all
        assert job_env.ENV not in given and leaks("\n".join(given.values())) == []


@pytest.mark.parametrize("overrides, needed, not_needed", [
    ([], set(), {"AWS_ACCESS_KEY_ID", "AZURE_STORAGE_ACCOUNT_KEY", "MLFLOW_TRACKING_PASSWORD"}),
    (["dataset.train=s3://bucket/train/*.gz"], {"AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN"},
     {"GOOGLE_APPLICATION_CREDENTIALS", "AZURE_STORAGE_ACCOUNT_KEY"}),
    (["dataset.test=abfs://c/test.tsv"], {"AZURE_STORAGE_ACCOUNT_KEY"},
     {"AZURE_STORAGE_KEY", "AWS_ACCESS_KEY_ID"}),
    (["runner.output_dir=gs://b/run"], {"GOOGLE_APPLICATION_CREDENTIALS"},
     {"AWS_ACCESS_KEY_ID"}),
    (["logger=mlflow"], {"MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"},
     {"AWS_ACCESS_KEY_ID"}),
    (["cluster.env_passthrough=[GITHUB_PAT,MYAPP_*]"], {"GITHUB_PAT", "MYAPP_SIGNING"},
     {"GITLAB_PAT", "DATABASE_URL"}),
])
def test_a_job_is_handed_the_credentials_its_config_needs(
        overrides: list[str], needed: set[str], not_needed: set[str]) -> None:
    from recrunner.config.compose import load
    from recrunner.fleet import job_env

    cfg = load(["dataset.train=/d/train.tsv", "dataset.test=/d/test.tsv", *overrides])
    env = {name: "v" for name in needed | not_needed}
    _, private = job_env.split(env, job_env.needed_names(cfg))
    assert set(private) == needed


@pytest.mark.parametrize("value", ["[MY-VAR]", "[1ABC]", "['A B']", "[A*B]", "['*']"])
def test_a_bad_passthrough_name_fails_at_load(value: str) -> None:
    proc = recrun("train", f"cluster.env_passthrough={value}", "--cfg", "job")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "cluster.env_passthrough[0]=" in lines[0] and "not an environment variable's name" \
        in lines[0], lines[0]


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


# Each process of the job records the FAKE variables it sees: every process when it starts,
# and once more when it exits (a worker reads the handed-over file after it started).
SPY = """import atexit, json, os, sys
def _seen(when):
    path = os.path.join({out!r}, f"{{os.getpid()}}-{{when}}.json")
    with open(path, "w") as f:
        json.dump({{"argv": open("/proc/self/cmdline").read().split("\\0"),
                   "fake": sorted(k for k in {names!r} if k in os.environ)}}, f)
_seen("start")
atexit.register(_seen, "exit")
"""


@pytest.mark.slow
def test_a_ps_job_sees_only_what_it_is_handed_and_shows_its_progress(
        small_synth: dict[str, str], tmp_path: Path) -> None:
    """A real PS job (Paddle's launcher, a server, two trainers) with the FAKE sweep in its
    environment and GITHUB_PAT passed through: Paddle's launcher sees none of them, the
    trainers exactly GITHUB_PAT, no file of the run and no output holds any value; the
    console shows the writer's evaluation lines as mode=local does."""
    import os
    import re

    spy, seen = tmp_path / "spy", tmp_path / "seen"
    spy.mkdir()
    seen.mkdir()
    (spy / "sitecustomize.py").write_text(SPY.format(out=str(seen), names=sorted(FAKE)))
    out = tmp_path / "run"
    path = os.pathsep.join(p for p in (str(spy), os.environ.get("PYTHONPATH")) if p)
    done = recrun("train", "mode=ps", f"runner.output_dir={out}", *SMALL_MODEL,
                  *data_overrides(small_synth), "runner.epochs=1", "mode.timeout_s=120",
                  "cluster.env_passthrough=[GITHUB_PAT]", env={**FAKE, "PYTHONPATH": path},
                  timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert leaks(done.stdout) == [] and leaks(done.stderr) == []
    files = [p for p in out.rglob("*") if p.is_file()]
    assert (out / "logs" / "envlog.0") in files and (out / "logs" / "workerlog.1") in files
    assert {str(p.relative_to(out)): leaks(p.read_bytes()) for p in files
            if leaks(p.read_bytes())} == {}
    views = [json.loads(p.read_text()) for p in seen.iterdir()]
    launcher = [v for v in views if "recrunner.fleet.paddle_launch" in v["argv"]]
    workers = [v for v in views if "--config-file" in v["argv"] and v not in launcher]
    owner = [v for v in views if v not in launcher + workers]
    assert len(owner) == 2 and all(v["fake"] == sorted(FAKE) for v in owner)  # the user's
    assert len(launcher) == 2 and all(v["fake"] == [] for v in launcher)
    # 3 processes (the server may be stopped before its exit hooks run)
    starts = [v for v in workers if v["fake"] == []]
    exits = [v for v in workers if v["fake"] == ["GITHUB_PAT"]]
    assert len(starts) == 3 and len(exits) >= 2 and len(starts) + len(exits) == len(workers)
    evaluation = re.compile(r"\[[\d:, -]+\]\[recrunner\.train\]\[INFO\] - epoch 1 step \d+: "
                            r"auc=0\.\d+ logloss=")
    assert any(evaluation.match(line) for line in done.stderr.splitlines()), done.stderr[-3000:]


def test_submit_renders_credentials_only_into_the_secret(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`recrun submit` with the FAKE sweep in its environment: the pods' spec, the ConfigMap
    and every other document hold none of them; the JuiceFS values only the Secret."""
    from recrunner.config.compose import load
    from recrunner.k8s import manifests, ops
    from tests.test_k8s_render import BASE, PS, SAMPLESET

    for name, value in FAKE.items():
        monkeypatch.setenv(name, value)
    rendered = ops.render(load([*BASE, *PS, *SAMPLESET,
                                "cluster.env_passthrough=[GITHUB_PAT, MYAPP_*]"]))
    secret = [d for d in rendered.docs if d["kind"] == "Secret"]
    assert leaks(manifests.dump_all([d for d in rendered.docs if d["kind"] != "Secret"])) == []
    assert sorted(leaks(manifests.dump_all(secret))) == [
        "JUICEFS_ACCESS_KEY", "JUICEFS_METAURL", "JUICEFS_SECRET_KEY"]
    assert [n for n in rendered.notes if "cluster.env_passthrough" in n] != []
