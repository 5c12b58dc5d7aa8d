"""`recrun train mode=ps mode.elastic.max_trainers=N` on this machine.

The supervisor starts an etcd server (unless mode.elastic.etcd names one), the parameter
servers, the master and `mode.trainers` trainers, each process with the environment a Paddle
Operator pod would have, and then:
- a trainer that exits or is killed is let go: the job goes on with the others (the master
  records the change); below mode.elastic.min_trainers, new trainers are started;
- `recrun scale RUN --trainers N` (scale.py) sets the count: new trainers are started, or the
  newest are sent SIGTERM (each finishes its task in flight);
- a server or the master that is lost fails the attempt: every process is stopped and the job
  starts again from its newest checkpoint (a mid-epoch one included), up to mode.max_restarts
  times. Those two hold state the trainers do not.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recrunner import atomic
from recrunner.config.compose import to_yaml
from recrunner.config.schema import RootConfig
from recrunner.elasticps import scale
from recrunner.elasticps.tasks import TaskQueue
from recrunner.elasticps.trainer import ETCD_VAR, JOB_VAR, MASTER, ROLE_VAR, TRAINER
from recrunner.fleet import etcd, job_env, status
from recrunner.fleet.echo import LogEcho
from recrunner.fleet.launcher import child_env, local_run_config, newest_mtime
from recrunner.fleet.roles import DistError, free_ports
from recrunner.train import checkpoint, midepoch

POLL_S = 0.2
KILL_GRACE_S = 10.0  # a trainer told to stop finishes its task in flight


def say(msg: str) -> None:
    print(f"recrun train: {msg}", file=sys.stderr, flush=True)


@dataclass
class Proc:
    role: str  # server, master or trainer
    index: int  # the server's index, or this supervisor's count of trainers started
    popen: subprocess.Popen
    log: Path
    stopping: bool = False

    @property
    def name(self) -> str:
        return f"{self.role} {self.index}" if self.role != MASTER else MASTER

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)


@dataclass
class Outcome:
    ok: bool
    message: str = ""


class Supervisor:
    def __init__(self, cfg: RootConfig) -> None:
        self.cfg, self.el = cfg, cfg.mode.elastic
        self.out = Path(cfg.runner.output_dir).resolve()
        self.server: etcd.LocalEtcd | None = None
        self.endpoint = ""
        self.job = f"{cfg.mode.elastic.job_id or 'ps'}-{os.urandom(4).hex()}"
        self.procs: list[Proc] = []
        self.started = 0  # trainers started in this attempt

    def run(self) -> dict[str, Any]:
        import json

        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        self.out.mkdir(parents=True, exist_ok=True)
        checkpoint.to_resume(self.out, self.cfg.runner.resume)
        summary_file = self.out / "summary.json"
        summary_file.unlink(missing_ok=True)
        scale.clear(self.out)
        if self.el.etcd:
            self.endpoint = etcd.resolve_endpoint(self.el.etcd)
            if not etcd.healthy(self.endpoint):
                raise DistError(f"etcd server {self.endpoint} (mode.elastic.etcd="
                                f"{self.el.etcd}) does not answer on /health")
        resume = self.cfg.runner.resume
        try:
            for attempt in range(self.cfg.mode.max_restarts + 1):
                if not self.el.etcd and (self.server is None or not self.server.alive()):
                    etcd.stop_quietly(self.server)
                    self.server = etcd.LocalEtcd.start(self.out)
                    self.endpoint = self.server.endpoint
                outcome = self.attempt(attempt, resume)
                if outcome.ok:
                    return dict(json.loads(summary_file.read_text()))
                if attempt < self.cfg.mode.max_restarts:
                    last = checkpoint.latest(self.out, verify=True)
                    mid = midepoch.newest(self.out, last)
                    where = "the start" if mid is None else f"checkpoint {mid.path}"
                    say(f"elastic ps job failed: {outcome.message}; restarting "
                        f"({attempt + 1}/{self.cfg.mode.max_restarts}) from {where}")
                    resume = True
            raise DistError(f"elastic ps job failed: {outcome.message}"
                            + (f" (after {self.cfg.mode.max_restarts} restarts)"
                               if self.cfg.mode.max_restarts else
                               "; runner.resume=true continues from the last checkpoint"))
        finally:
            etcd.stop_quietly(self.server)
            scale.clear(self.out)

    # --- one attempt -------------------------------------------------------------------------
    def attempt(self, attempt: int, resume: bool) -> Outcome:
        run_cfg = local_run_config(self.cfg, self.out, resume)
        config_file = self.out / "dist" / "config.yaml"
        atomic.write_text(config_file, to_yaml(run_cfg), "config")
        log_dir = self.out / ("logs" if attempt == 0 else f"logs-restart{attempt}")
        log_dir.mkdir(parents=True, exist_ok=True)
        status.clear(self.out)
        servers = [f"127.0.0.1:{p}" for p in free_ports(self.cfg.mode.servers)]
        base = child_env(run_cfg)
        base.update({"PADDLE_PSERVERS_IP_PORT_LIST": ",".join(servers), "POD_IP": "127.0.0.1",
                     "PADDLE_WITH_GLOO": "0", ETCD_VAR: self.endpoint,
                     JOB_VAR: f"{self.job}-{attempt}"})
        cmd = [sys.executable, "-u", "-m", "recrunner", "train", "--config-file",
               str(config_file)]
        self.procs, self.started = [], 0
        with job_env.handed_over(base, job_env.needed_names(run_cfg)) as env:
            try:
                for i, endpoint in enumerate(servers):
                    self.spawn("server", i, cmd, {**env, "TRAINING_ROLE": "PSERVER",
                                                  "PADDLE_PORT": endpoint.rsplit(":", 1)[1],
                                                  "PADDLE_TRAINERS_NUM": "1"}, log_dir)
                master_port = free_ports(1)[0]
                self.spawn(MASTER, 0, cmd, {**env, "TRAINING_ROLE": "TRAINER", ROLE_VAR: MASTER,
                                            "PADDLE_TRAINER_ID": "0", "PADDLE_TRAINERS_NUM": "1",
                                            "PADDLE_TRAINER_ENDPOINTS":
                                                f"127.0.0.1:{master_port}",
                                            "PADDLE_PORT": str(master_port)}, log_dir)
                trainer_env = {**env, "TRAINING_ROLE": "TRAINER", ROLE_VAR: TRAINER}
                first = 0 if self.el.autoscaled else self.cfg.mode.trainers
                for _ in range(first):
                    self.start_trainer(cmd, trainer_env, log_dir)
                say(f"elastic ps job {self.job}: {len(servers)} server(s), a master, "
                    + (f"{first} trainer(s)" if first else "trainers when `recrun autoscale` "
                       "grants them") + f" ({self.el.min_trainers}..{self.el.max_trainers}); "
                    f"etcd {self.endpoint}; logs {log_dir}")
                queue = TaskQueue(etcd.Etcd(self.endpoint), base[JOB_VAR])
                scale.write_job(self.out, os.getpid(), self.endpoint, base[JOB_VAR])
                return self.supervise(cmd, trainer_env, log_dir, queue)
            finally:
                self.stop_all()

    def spawn(self, role: str, index: int, cmd: list[str], env: dict[str, str],
              log_dir: Path) -> Proc:
        name = {"server": f"serverlog.{index}", MASTER: "masterlog",
                TRAINER: f"workerlog.{index}"}[role]
        log = log_dir / name
        with open(log, "w") as fh:
            popen = subprocess.Popen(cmd, env=env, cwd=self.out / "dist", stdout=fh,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        proc = Proc(role, index, popen, log)
        self.procs.append(proc)
        return proc

    def start_trainer(self, cmd: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.started += 1
        self.spawn(TRAINER, self.started, cmd, env, log_dir)

    def trainers(self) -> list[Proc]:
        """The trainers running and not told to stop, oldest first."""
        return [p for p in self.procs if p.role == TRAINER and p.alive() and not p.stopping]

    def supervise(self, cmd: list[str], env: dict[str, str], log_dir: Path,
                  queue: TaskQueue) -> Outcome:
        echo = LogEcho(log_dir)
        last_life, last_mtime = time.monotonic(), 0.0
        gone: set[int] = set()
        while True:
            echo.poll()
            # The master has ended the job: trainers and servers now leave by themselves.
            ending = queue.state()[2]
            for p in self.procs:
                if p.role == TRAINER and not p.alive() and id(p) not in gone:
                    gone.add(id(p))
                    if not p.stopping and not ending:
                        say(f"{self.trainer_name(p)} exited (code {p.popen.returncode}); the "
                            f"job goes on with {len(self.trainers())} trainer(s)")
            master = next(p for p in self.procs if p.role == MASTER)
            if not master.alive():
                if master.popen.returncode == 0:
                    return self.wait_servers(echo)
                return Outcome(False, self.describe(master))
            lost = [p for p in self.procs if p.role == "server" and not p.alive()]
            if lost and not ending:
                return Outcome(False, self.describe(lost[0]))
            if not ending:
                self.resize(cmd, env, log_dir)
            mtime = newest_mtime([log_dir, status.status_dir(self.out)])
            if not self.trainers() and self.el.autoscaled:
                mtime = time.time()  # pending: waiting for the autoscaler is not a hang
            if mtime > last_mtime:
                last_mtime, last_life = mtime, time.monotonic()
            elif time.monotonic() - last_life > self.cfg.mode.timeout_s:
                return Outcome(False, f"no sign of life (log output) from the job for "
                                      f"mode.timeout_s={self.cfg.mode.timeout_s}s; logs: "
                                      f"{log_dir}")
            time.sleep(POLL_S)

    def trainer_name(self, proc: Proc) -> str:
        """`trainer <id>` by the PS client id it took (its status file), else by pid."""
        for s in status.read_all(self.out):
            if s.role == "trainer" and s.pid == proc.popen.pid:
                return f"trainer {s.index}"
        return f"a trainer (pid {proc.popen.pid})"

    def resize(self, cmd: list[str], env: dict[str, str], log_dir: Path) -> None:
        """Start or stop trainers toward the count `recrun scale` set (never below
        min_trainers: a lost trainer is replaced then)."""
        # An autoscaled job runs what `recrun autoscale` grants, nothing before its first grant.
        want = scale.target(self.out, 0 if self.el.autoscaled else self.cfg.mode.trainers)
        if want or not self.el.autoscaled:
            want = max(self.el.min_trainers, min(self.el.max_trainers, want))
        running = self.trainers()
        for _ in range(want - len(running)):
            self.start_trainer(cmd, env, log_dir)
            say(f"a trainer started ({len(running)} -> {want} trainers; log "
                f"{log_dir / f'workerlog.{self.started}'})")
        for p in reversed(running[want:]):
            p.stopping = True
            p.stop(signal.SIGTERM)
            say(f"{self.trainer_name(p)} told to stop after its task ({len(running)} -> "
                f"{want} trainers)")

    def wait_servers(self, echo: LogEcho) -> Outcome:
        """The master finished and stopped the servers: they exit."""
        deadline = time.monotonic() + KILL_GRACE_S
        while any(p.alive() for p in self.procs if p.role == "server"):
            if time.monotonic() > deadline:
                break  # the run is complete: stop_all ends them
            time.sleep(POLL_S)
        echo.poll()
        return Outcome(True)

    def describe(self, proc: Proc) -> str:
        """Why a server or the master ended: its status message, or how it died."""
        kind, index = ("trainer", 0) if proc.role == MASTER else ("server", proc.index)
        for s in status.read_all(self.out):
            if s.role == kind and s.index == index and s.state == status.FAILED:
                return f"{proc.name} failed: {s.message}; log: {proc.log}"
        code = proc.popen.returncode
        how = f"was killed by signal {-code}" if code is not None and code < 0 else \
            f"exited with code {code}"
        return f"{proc.name} (pid {proc.popen.pid}) {how}; log: {proc.log}"

    def stop_all(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in self.procs:
                if p.alive():
                    p.stop(sig)
            deadline = time.monotonic() + KILL_GRACE_S
            while any(p.alive() for p in self.procs) and time.monotonic() < deadline:
                time.sleep(POLL_S)


def launch_elastic_ps(cfg: RootConfig) -> dict[str, Any]:
    return Supervisor(cfg).run()
