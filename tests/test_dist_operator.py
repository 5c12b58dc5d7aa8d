"""The pod entry point: `recrun train --config-file` with exactly the Paddle Operator's env."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from recrunner.config.compose import load, to_yaml
from recrunner.fleet.roles import DistError, free_ports, role_from_env
from tests.conftest import SMALL_MODEL, data_overrides

TRAIN = [*SMALL_MODEL, "runner.learning_rate=0.01", "runner.batch_size=256", "runner.epochs=1",
         "mode.timeout_s=60"]


def config_file(tmp_path: Path, overrides: list[str]) -> Path:
    path = tmp_path / "config.yaml"  # what the k8s ConfigMap mounts at /etc/recrunner
    path.write_text(to_yaml(load(overrides)))
    return path


def start_pods(cfg: Path, envs: list[dict[str, str]], log_dir: Path) -> list[int]:
    """Start each 'pod' as a process with only the operator's variables added; no launcher."""
    log_dir.mkdir()
    procs = []
    for i, env in enumerate(envs):
        log = open(log_dir / f"pod{i}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "recrunner", "train", "--config-file", str(cfg)],
            cwd=log_dir, env={**os.environ, "OMP_NUM_THREADS": "1", **env}, stdout=log,
            stderr=subprocess.STDOUT), log))
    codes = []
    try:
        for proc, log in procs:
            codes.append(proc.wait(timeout=240))
            log.close()
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
    return codes


@pytest.mark.slow
def test_operator_env_collective(synth_data: dict[str, str], tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = config_file(tmp_path, ["mode=collective", *data_overrides(synth_data), *TRAIN,
                                 f"runner.output_dir={run}"])
    ports = free_ports(2)
    endpoints = ",".join(f"127.0.0.1:{p}" for p in ports)
    envs = [{"TRAINING_ROLE": "TRAINER", "PADDLE_TRAINING_ROLE": "TRAINER",
             "PADDLE_TRAINER_ID": str(i), "POD_IP": "127.0.0.1", "PADDLE_PORT": str(ports[i]),
             "PADDLE_TRAINER_ENDPOINTS": endpoints, "PADDLE_TRAINERS": "127.0.0.1,127.0.0.1",
             "PADDLE_TRAINERS_NUM": "2", "TRAINER_PORTS_NUM": "20"} for i in range(2)]
    codes = start_pods(cfg, envs, tmp_path / "logs")
    assert codes == [0, 0], [(p.name, p.read_text()[-2000:]) for p in
                             (tmp_path / "logs").iterdir()]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["train_examples"] == 20_000
    assert summary["auc"] > 0.7
    assert (run / "export" / "model.json").is_file()


@pytest.mark.slow
def test_operator_env_ps(small_synth: dict[str, str], tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = config_file(tmp_path, ["mode=ps", *data_overrides(small_synth), *TRAIN,
                                 f"runner.output_dir={run}"])
    server_port, t0, t1, gloo = free_ports(4)
    common = {"PADDLE_PSERVERS_IP_PORT_LIST": f"127.0.0.1:{server_port}",
              "PADDLE_TRAINER_ENDPOINTS": f"127.0.0.1:{t0},127.0.0.1:{t1}",
              "PADDLE_TRAINERS": "127.0.0.1,127.0.0.1", "PADDLE_TRAINERS_NUM": "2",
              "POD_IP": "127.0.0.1", "TRAINER_PORTS_NUM": "20", "PADDLE_WITH_GLOO": "1",
              "PADDLE_GLOO_RENDEZVOUS": "3", "PADDLE_GLOO_HTTP_ENDPOINT": f"127.0.0.1:{gloo}"}
    envs = [{**common, "TRAINING_ROLE": "PSERVER", "PADDLE_TRAINING_ROLE": "PSERVER",
             "PADDLE_TRAINER_ID": "0", "PADDLE_PORT": str(server_port)}]
    envs += [{**common, "TRAINING_ROLE": "TRAINER", "PADDLE_TRAINING_ROLE": "TRAINER",
              "PADDLE_TRAINER_ID": str(i), "PADDLE_PORT": str(p)} for i, p in enumerate((t0, t1))]
    codes = start_pods(cfg, envs, tmp_path / "logs")
    assert codes == [0, 0, 0], [(p.name, p.read_text()[-2000:]) for p in
                                (tmp_path / "logs").iterdir()]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["mode"] == "ps" and summary["train_examples"] == 4_000
    assert (run / "export" / "model.json").is_file()


@pytest.mark.slow
def test_missing_server_fails_in_bounded_time(synth_data: dict[str, str],
                                              tmp_path: Path) -> None:
    """A trainer whose servers never come up stops with one clear line, not a hang."""
    cfg = config_file(tmp_path, ["mode=ps", *data_overrides(synth_data), *TRAIN,
                                 "mode.timeout_s=5", f"runner.output_dir={tmp_path / 'run'}"])
    server_port, t0, gloo = free_ports(3)
    env = {**os.environ, "TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "0",
           "PADDLE_PSERVERS_IP_PORT_LIST": f"127.0.0.1:{server_port}",
           "PADDLE_TRAINER_ENDPOINTS": f"127.0.0.1:{t0}", "PADDLE_TRAINERS_NUM": "1",
           "POD_IP": "127.0.0.1", "PADDLE_PORT": str(t0), "PADDLE_WITH_GLOO": "1",
           "PADDLE_GLOO_RENDEZVOUS": "3", "PADDLE_GLOO_HTTP_ENDPOINT": f"127.0.0.1:{gloo}"}
    proc = subprocess.run([sys.executable, "-m", "recrunner", "train", "--config-file",
                           str(cfg)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert "did not accept connections within 5s" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("recrun train: error:")


def test_bad_endpoint_lists_are_one_line_errors() -> None:
    base = {"TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "1",
            "POD_IP": "127.0.0.1", "PADDLE_PORT": "6000"}
    with pytest.raises(DistError, match="is not host:port"):
        role_from_env("ps", {**base, "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:x"})
    with pytest.raises(DistError, match="PADDLE_PSERVERS_IP_PORT_LIST"):
        role_from_env("ps", base)
    with pytest.raises(DistError, match="lists 1 endpoints but PADDLE_TRAINERS_NUM=2"):
        role_from_env("collective", {**base, "PADDLE_TRAINERS_NUM": "2",
                                     "PADDLE_TRAINER_ENDPOINTS": "127.0.0.1:6000"})
    with pytest.raises(DistError, match="not in PADDLE_PSERVERS_IP_PORT_LIST"):
        role_from_env("ps", {**base, "TRAINING_ROLE": "PSERVER",
                             "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:7000"})
    role = role_from_env("ps", {**base, "PADDLE_PSERVERS_IP_PORT_LIST": "127.0.0.1:7000",
                                "PADDLE_TRAINER_ID": "0"})
    assert role.name == "trainer 0" and role.servers == ["127.0.0.1:7000"]


def test_port_clash_is_a_one_line_error() -> None:
    import socket

    from recrunner.fleet.roles import check_port_free

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(DistError, match=f"127.0.0.1:{port} is already in use"):
            check_port_free(f"127.0.0.1:{port}", "parameter server 0")
