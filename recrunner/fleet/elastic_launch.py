"""`recrun train mode=collective mode.elastic.max_nodes=N` on this machine: an etcd server
(started here unless mode.elastic.etcd names one), one paddle.distributed.launch per node
rendezvousing through it, a supervisor that restarts nodes that exit (Paddle's launcher often
exits when its own trainer died) and prints every membership change the trainers record."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recrunner import atomic
from recrunner.config.compose import to_yaml
from recrunner.config.schema import RootConfig
from recrunner.errors import RecrunnerError
from recrunner.fleet import etcd, job_env, paddle_launch
from recrunner.fleet.echo import LogEcho
from recrunner.fleet.elastic import state_dir
from recrunner.fleet.launcher import child_env, local_run_config, newest_mtime
from recrunner.fleet.roles import DistError
from recrunner.train import checkpoint, midepoch

POLL_S = 0.2
ETCD_CHECK_S = 1.0
KILL_GRACE_S = 10.0  # a trainer saves its position on SIGTERM before it exits
# Paddle's launcher counts each membership change against --max_restart (default 3).
LAUNCHER_MAX_RESTART = 10_000


def say(msg: str) -> None:
    print(f"recrun train: {msg}", file=sys.stderr, flush=True)


def node_command(cfg: RootConfig, endpoint: str, job_id: str, config_file: Path,
                 log_dir: Path) -> list[str]:
    """One node's launcher with the arguments a pod's has (recrunner.k8s renders the same)."""
    el = cfg.mode.elastic
    return [*paddle_launch.command(),
            "--master", f"etcd://{endpoint}", "--job_id", etcd.launcher_job_id(job_id),
            "--nnodes", f"{el.min_nodes}:{el.max_nodes}", "--elastic_level", "1",
            "--elastic_timeout", str(el.wait_s), "--max_restart", str(LAUNCHER_MAX_RESTART),
            "--nproc_per_node", "1", "--log_dir", str(log_dir),
            sys.executable, "-u", "-m", "recrunner", "train", "--config-file", str(config_file)]


def elastic_env(cfg: RootConfig, job_id: str) -> dict[str, str]:
    env = child_env(cfg)
    # The launcher imports the etcd3 client, whose generated code protobuf 4/5 refuses
    # without the pure-Python implementation.
    env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"
    env["RECRUNNER_ELASTIC_JOB"] = job_id
    return env


def children(pid: int) -> list[int]:
    """Every descendant of `pid` (Paddle starts each trainer in a session of its own, so
    killing the launcher's process group leaves them)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


@dataclass
class Node:
    index: int
    log_root: Path
    proc: subprocess.Popen | None = None
    starts: int = 0
    trainers: set[int] = field(default_factory=set)  # pids seen under this launcher
    done: bool = False

    @property
    def log_dir(self) -> Path:
        return self.log_root / (f"node{self.index}" if self.starts <= 1
                                else f"node{self.index}-restart{self.starts - 1}")

    def start(self, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
        self.starts += 1
        log_dir = self.log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        cmd = [*cmd]
        cmd[cmd.index("--log_dir") + 1] = str(log_dir)
        with open(log_dir / "launch.log", "w") as log:
            self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self.trainers = set()

    def watch_children(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.trainers.update(children(self.proc.pid))

    def stop(self, grace_s: float = KILL_GRACE_S) -> None:
        """The whole node, as a pod is stopped: SIGTERM, then SIGKILL after `grace_s`."""
        if self.proc is None:
            return
        self.watch_children()
        pids = [self.proc.pid, *self.trainers]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)
            kill_all(pids, sig)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None and not any(alive(p) for p in self.trainers):
                    return
                time.sleep(POLL_S)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def orphans(self) -> list[int]:
        return [p for p in self.trainers if alive(p)]


def alive(pid: int) -> bool:
    from recrunner.fleet.status import pid_alive

    return pid_alive(pid)


def default_job_id(cfg: RootConfig) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "-", str(cfg.model.name))[:40] or "job"
    return f"{base}-{os.urandom(4).hex()}"


def check_fresh(cfg: RootConfig, out: Path) -> None:
    """As for any run: no fresh start over a previous run's checkpoints."""
    checkpoint.to_resume(out, cfg.runner.resume)
    mid = checkpoint.latest(midepoch.root(out))
    if mid is not None and not cfg.runner.resume:
        raise RecrunnerError(f"{out} already holds a mid-epoch checkpoint ({mid.path}); pass "
                             "runner.resume=true to continue it or choose another "
                             "runner.output_dir")


class Supervisor:
    def __init__(self, cfg: RootConfig) -> None:
        self.cfg, self.el = cfg, cfg.mode.elastic
        self.out = Path(cfg.runner.output_dir).resolve()
        self.server: etcd.LocalEtcd | None = None
        self.endpoint = ""
        self.job_id = self.el.job_id or default_job_id(cfg)
        self.nodes: list[Node] = []
        self.restarts_left = self.el.node_restarts
        self.events_seen = 0

    def prepare(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        check_fresh(self.cfg, self.out)
        if self.el.etcd:
            self.endpoint = etcd.resolve_endpoint(self.el.etcd)
            if not etcd.healthy(self.endpoint):
                raise DistError(f"etcd server {self.endpoint} (mode.elastic.etcd="
                                f"{self.el.etcd}) does not answer on /health")
        else:
            self.server = etcd.LocalEtcd.start(self.out)
            self.endpoint = self.server.endpoint
        keys = etcd.EtcdKeys(self.endpoint, etcd.launcher_job_id(self.job_id))
        live = keys.live_nodes()
        if live and not self.el.job_id:
            raise DistError(f"etcd {self.endpoint}: generated job id {self.job_id} is in use")
        if live:
            say(f"joining elastic job {self.job_id} on etcd {self.endpoint} "
                f"({len(live)} node(s) alive)")
        elif self.el.job_id and self.finished_before():
            return
        else:
            stale = keys.clear()
            if stale:
                say(f"removed {stale} stale key(s) of an earlier job {self.job_id} from etcd")
            if not self.cfg.runner.resume:
                shutil.rmtree(state_dir(self.out), ignore_errors=True)
            (self.out / "summary.json").unlink(missing_ok=True)  # a new job's, when it ends
        state_dir(self.out).mkdir(parents=True, exist_ok=True)

    def finished_before(self) -> bool:
        """A node joining job <id> after it finished: nothing left to do (starting it would
        run a new one-node job over the finished run)."""
        try:
            summary = json.loads((self.out / "summary.json").read_text())
        except (OSError, ValueError):
            return False
        return summary.get("elastic_job_id") == self.job_id

    def run(self) -> dict[str, Any]:
        # SIGTERM (a scheduler, a test's clean-up) stops the nodes as Ctrl-C does: the nodes
        # run in sessions of their own and would otherwise outlive this process.
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        self.prepare()
        if self.el.job_id and not self.nodes and self.finished_before():
            say(f"elastic job {self.job_id} has finished already: nothing to join")
            return self.finished()
        try:
            return self.supervise()
        finally:
            for node in self.nodes:
                node.stop(grace_s=2.0)
            etcd.stop_quietly(self.server)

    def supervise(self) -> dict[str, Any]:
        count = self.el.nodes or self.el.max_nodes
        run_cfg = local_run_config(self.cfg, self.out, resume=True)
        threads = max(1, self.cfg.runner.threads // count)
        run_cfg.runner.threads = threads
        config_file = self.out / "dist" / f"elastic-{os.getpid()}.yaml"
        atomic.write_text(config_file, to_yaml(run_cfg), "launcher_config")
        log_root = self.out / "logs" / f"elastic-{os.getpid()}"
        cmd = node_command(self.cfg, self.endpoint, self.job_id, config_file, log_root)
        # An allow-listed environment, credentials through a private file: Paddle's launcher
        # writes the environment it is given into the run's logs (as in launcher.launch).
        with job_env.handed_over(elastic_env(run_cfg, self.job_id),
                                 job_env.needed_names(run_cfg)) as env:
            self.metrics_offset()
            say(f"elastic job {self.job_id}: {count} node(s) here, {self.el.min_nodes}.."
                f"{self.el.max_nodes} in all, etcd {self.endpoint}; logs: {log_root}")
            for i in range(count):
                node = Node(i, log_root)
                node.start(cmd, env, config_file.parent)
                self.nodes.append(node)
            self.write_nodes()
            last_etcd_ok = time.monotonic()
            last_etcd_check = 0.0
            last_life, last_mtime = time.monotonic(), 0.0
            echo = LogEcho(log_root)
            while True:
                echo.poll()
                self.print_events()
                now = time.monotonic()
                if self.server is not None and not self.server.alive():
                    raise DistError(f"the etcd server {self.endpoint} (pid {self.server.proc.pid}, "
                                    f"started by this run) exited with code "
                                    f"{self.server.proc.poll()}: the job's rendezvous is gone; "
                                    f"log: {self.server.log}; continue with runner.resume=true")
                if self.server is None and now - last_etcd_check >= ETCD_CHECK_S:
                    last_etcd_check = now
                    if etcd.healthy(self.endpoint, 1.0):
                        last_etcd_ok = now
                    elif now - last_etcd_ok > self.el.etcd_timeout_s:
                        raise DistError(f"etcd server {self.endpoint} (mode.elastic.etcd) has not "
                                        f"answered for {self.el.etcd_timeout_s}s "
                                        "(mode.elastic.etcd_timeout_s): the job's rendezvous is "
                                        "gone; continue with runner.resume=true")
                for node in self.nodes:
                    if not node.done:
                        self.check_node(node, cmd, env, config_file.parent)
                if all(node.done for node in self.nodes):
                    echo.poll()
                    return self.finished()
                mtime = newest_mtime([n.log_dir for n in self.nodes] + [state_dir(self.out)])
                if mtime > last_mtime:
                    last_mtime, last_life = mtime, now
                elif now - last_life > self.cfg.mode.timeout_s:
                    raise DistError(f"no sign of life (log output) from the elastic job for "
                                    f"mode.timeout_s={self.cfg.mode.timeout_s}s; logs: {log_root}")
                time.sleep(POLL_S)


    def check_node(self, node: Node, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
        assert node.proc is not None
        node.watch_children()
        rc = node.proc.poll()
        if rc is None:
            return
        orphans = node.orphans()
        if orphans:  # a node is one unit, as a pod is: its trainer goes with its launcher
            kill_all(orphans, signal.SIGKILL)
        if rc == 0 or self.finished_before():
            node.done = True
            return
        log = node.log_dir / "workerlog.0"
        if rc < 0:
            # Killed from outside (a preempted machine, an operator): that node is gone; the
            # others go on without it. Locally nothing brings it back (on a cluster, the pod's
            # replacement does); another `recrun train` may join in its place.
            node.done = True
            others = [n for n in self.nodes if not n.done]
            if not others:
                raise DistError(f"node {node.index}, the last one here, was killed "
                                f"(signal {-rc}); log: {log}; continue with runner.resume=true")
            say(f"node {node.index} was killed (signal {-rc}): the job goes on without it, "
                f"{len(others)} node(s) here")
            return
        # Exited by itself: Paddle's launcher does when its own trainer died, or when its
        # heartbeat lapsed during a rendezvous; it comes back, a bounded number of times.
        if self.restarts_left > 0:
            self.restarts_left -= 1
            used = self.el.node_restarts - self.restarts_left
            say(f"node {node.index} exited with code {rc} (log: {log}); restarting it "
                f"({used}/{self.el.node_restarts}, mode.elastic.node_restarts)")
            node.start(cmd, env, cwd)
            self.write_nodes()
            return
        raise DistError(f"node {node.index} exited with code {rc} and the "
                        f"mode.elastic.node_restarts={self.el.node_restarts} restarts are used "
                        f"up; log: {log}")

    def write_nodes(self) -> None:
        """Which processes make up each node (for operators, tests and benchmarks)."""
        nodes = {str(n.index): {"launcher_pid": n.proc.pid if n.proc else None,
                                "log_dir": str(n.log_dir), "starts": n.starts}
                 for n in self.nodes}
        atomic.write_json(state_dir(self.out) / f"nodes-{os.getpid()}.json",
                          {"job_id": self.job_id, "etcd": self.endpoint,
                           "etcd_pid": self.server.proc.pid if self.server else None,
                           "nodes": nodes}, "elastic_nodes")

    def metrics_offset(self) -> None:
        try:
            self.events_seen = len((self.out / "metrics.jsonl").read_text().splitlines())
        except OSError:
            self.events_seen = 0

    def print_events(self) -> None:
        """Say each membership change the job's writer recorded."""
        try:
            lines = (self.out / "metrics.jsonl").read_text().splitlines()
        except OSError:
            return
        for line in lines[self.events_seen:]:
            try:
                row = json.loads(line)
            except ValueError:
                break  # being written
            self.events_seen += 1
            if row.get("trigger") == "restart":
                say(f"world size {row['world_size_before']} -> {row['world_size_after']} "
                    f"({row['reason']}): training again from step {row['step']}, "
                    f"{row['steps_lost']} step(s) lost, {row['seconds_since_last_step']:.1f}s "
                    "after the last step")

    def finished(self) -> dict[str, Any]:
        self.print_events()
        try:
            return json.loads((self.out / "summary.json").read_text())
        except (OSError, ValueError):
            raise DistError(f"the elastic job's nodes exited without a summary in {self.out}; "
                            f"logs: {self.out / 'logs'}") from None


def require_etcd3() -> None:
    """Paddle's launcher imports the etcd3 client for its etcd:// rendezvous; only the
    `elastic` extra (and `test`) installs it, so say which before any work starts."""
    import importlib.util

    if importlib.util.find_spec("etcd3") is None:
        raise RecrunnerError("mode.elastic needs the etcd3 package: "
                             "pip install 'recrunner[elastic]'")


def launch_elastic(cfg: RootConfig) -> dict[str, Any]:
    require_etcd3()  # also train's check; here for callers that skip it (--config-file)
    return Supervisor(cfg).run()


def node_processes(out: str | Path) -> dict[str, Any]:
    """nodes-<supervisor pid>.json of a running job, merged, with each node's live processes
    (its launcher and the trainer under it): what stopping one node by hand needs."""
    merged: dict[str, Any] = {}
    for path in sorted(state_dir(out).glob("nodes-*.json")):
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for index, node in info["nodes"].items():
            pid = node["launcher_pid"]
            node["pids"] = [pid, *children(pid)] if pid and alive(pid) else []
            merged[f"{path.stem.removeprefix('nodes-')}/{index}"] = {**info, **node}
    return merged
