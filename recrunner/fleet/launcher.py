"""`recrun train mode=collective|ps` on this machine: start the job through
paddle.distributed.launch, supervise it, name the process that failed, restart from the last
checkpoint up to mode.max_restarts times."""

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recrunner import atomic
from recrunner.config.compose import to_yaml
from recrunner.config.schema import RootConfig
from recrunner.fleet import job_env, paddle_launch, status
from recrunner.fleet.echo import LogEcho
from recrunner.fleet.roles import PORT_IN_USE, DistError, free_ports
from recrunner.train import checkpoint

POLL_S = 0.1
# After the first failure, wait this long for the others' status before naming the culprit
# (a killed process writes nothing; its peers then fail with a communication error).
SETTLE_S = 1.0
PORT_TRIES = 3  # launches per attempt when a server finds its port taken
# Launches per attempt when a PS job never forms: Paddle 3.0's start-up (fleet.init_worker)
# has hung now and then here, each trainer waiting in the servers' barrier, with nothing
# trained yet (docs/distributed.md). Once more, not more: a job that cannot form fails.
FORM_TRIES = 2
KILL_GRACE_S = 5.0


@dataclass
class Outcome:
    ok: bool
    message: str = ""
    port_taken: bool = False  # a server could not bind: nothing ran, launch again
    not_formed: bool = False  # a PS job's start-up did not complete: nothing ran either


def log_name(role: str, index: int) -> str:
    """paddle.distributed.launch's log file for a process (single node)."""
    return f"{'serverlog' if role == 'server' else 'workerlog'}.{index}"


def launch_command(cfg: RootConfig, config_file: Path, log_dir: Path) -> list[str]:
    cmd = [*paddle_launch.command(), "--log_dir", str(log_dir)]
    if str(cfg.mode.name) == "collective":
        cmd += ["--nproc_per_node", str(cfg.mode.nproc)]
    else:
        # Every endpoint given: left to choose, the launcher numbers server ports up from a
        # fixed 6070 (and gloo's from 6767), so two jobs on one machine started together
        # both bound 6071 and one server failed to listen. Free ephemeral ports instead.
        servers, trainers = cfg.mode.servers, cfg.mode.trainers
        ports = [f"127.0.0.1:{p}" for p in free_ports(servers + trainers + 1)]
        cmd += ["--servers", ",".join(ports[:servers]),
                "--trainers", ",".join(ports[servers:servers + trainers]),
                "--gloo_port", ports[-1].rsplit(":", 1)[1]]
    # Every process runs the same entry point a Paddle Operator pod runs.
    return cmd + [sys.executable, "-u", "-m", "recrunner", "train", "--config-file",
                  str(config_file)]


def job_size(cfg: RootConfig) -> dict[str, int]:
    if str(cfg.mode.name) == "collective":
        return {"trainer": cfg.mode.nproc}
    return {"server": cfg.mode.servers, "trainer": cfg.mode.trainers}


def local_run_config(cfg: RootConfig, out: Path, resume: bool) -> RootConfig:
    """The config the processes get: absolute paths (they run in <run>/dist, where Paddle
    drops its scratch files) and the runner's threads shared out among them."""
    def absolute(spec: str) -> str:
        return spec if "://" in spec else os.path.abspath(spec)

    threads = max(1, cfg.runner.threads // sum(job_size(cfg).values()))
    return dataclasses.replace(
        cfg,
        dataset=dataclasses.replace(cfg.dataset, train=absolute(cfg.dataset.train),
                                    test=absolute(cfg.dataset.test)),
        runner=dataclasses.replace(cfg.runner, output_dir=str(out), resume=resume,
                                   threads=threads,
                                   init_from=cfg.runner.init_from and absolute(
                                       cfg.runner.init_from)))


def child_env(cfg: RootConfig) -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(cfg.runner.threads)
    env.setdefault("GLOG_minloglevel", "2")
    if str(cfg.mode.name) == "ps":
        env.setdefault("FLAGS_enable_pir_api", "0")
    for var in ("TRAINING_ROLE", "PADDLE_TRAINING_ROLE", "PADDLE_ROLE", "PADDLE_TRAINER_ID",
                "PADDLE_TRAINER_ENDPOINTS", "PADDLE_PSERVERS_IP_PORT_LIST"):
        env.pop(var, None)  # a stale role would make the children ignore the launcher's
    return env


@contextlib.contextmanager
def trainers_stop_on_signal(out: Path, follow: bool) -> Iterator[None]:
    """runner.follow: SIGTERM or SIGINT here asks the job's trainers to stop after the pass
    in progress (recrunner.online.passes: they agree on it, finish and stop the servers), so
    the job ends as a success. Without follow the default handling stays (the job is
    stopped)."""
    if not follow:
        yield
        return

    def forward(signum: int, frame: Any) -> None:
        print("recrun train: stopping after the pass in progress", file=sys.stderr, flush=True)
        for p in status.read_all(out):
            if p.role == "trainer" and status.pid_alive(p.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def supervise(proc: subprocess.Popen, cfg: RootConfig, log_dir: Path) -> Outcome:
    out = Path(cfg.runner.output_dir)
    expected = job_size(cfg)
    timeout_s = cfg.mode.timeout_s
    last_life = time.monotonic()
    last_mtime = 0.0
    first_bad: float | None = None
    seen_dead: dict[int, float] = {}  # pid -> when first seen gone (a death has no status)
    next_listen_check = 0.0
    echo = LogEcho(log_dir)
    while True:
        echo.poll()
        rc = proc.poll()
        procs = status.read_all(out)
        failed = [p for p in procs if p.state == status.FAILED]
        died = [p for p in procs if p.state == status.RUNNING and not status.pid_alive(p.pid)]
        now = time.time()  # one instant per poll: deaths seen together tie
        for p in died:
            seen_dead.setdefault(p.pid, now)
        if rc is not None and not failed and not died:
            done = sum(p.state == status.DONE for p in procs)
            if rc == 0 and done == sum(expected.values()):
                echo.poll()
                return Outcome(True)
            # The launcher itself failed, or a process died before it wrote its status.
            first_bad = first_bad or time.monotonic()
        if failed or died:
            first_bad = first_bad or time.monotonic()
        if first_bad is not None and (time.monotonic() - first_bad >= SETTLE_S or rc is not None
                                      and time.monotonic() - first_bad >= SETTLE_S / 2):
            echo.poll()
            message = describe_failure(procs, rc, log_dir, expected, seen_dead, proc.pid)
            return Outcome(False, message, port_taken=PORT_IN_USE in message,
                           not_formed=any(p.startup == status.TIMED_OUT for p in failed)
                           and not_formed(procs, expected))
        if time.monotonic() >= next_listen_check:  # once a second: it reads the logs
            next_listen_check = time.monotonic() + 1.0
            unbound = server_not_listening(log_dir, expected.get("server", 0))
            if unbound:  # its trainers would wait for it until mode.timeout_s
                return Outcome(False, unbound, port_taken=True)
        mtime = newest_mtime([log_dir, status.status_dir(out)])
        if mtime > last_mtime:
            last_mtime, last_life = mtime, time.monotonic()
        elif time.monotonic() - last_life > timeout_s:
            return Outcome(False, f"no sign of life (log output) from the job for "
                                  f"mode.timeout_s={timeout_s}s; logs: {log_dir}",
                           not_formed=not_formed(procs, expected))
        time.sleep(POLL_S)


def not_formed(procs: list[status.ProcessStatus], expected: dict[str, int]) -> bool:
    """A PS job none of whose trainers has trained: one or more still in Paddle's start-up
    (running without the FORMED mark, or failed by its start-up watchdog), none done."""
    if "server" not in expected:
        return False
    trainers = [p for p in procs if p.role == "trainer"]
    return (len(trainers) == expected["trainer"] and all(p.state != status.DONE for p in trainers)
            and any(p.startup != status.FORMED for p in trainers))


def describe_failure(procs: list[status.ProcessStatus], rc: int | None, log_dir: Path,
                     expected: dict[str, int], seen_dead: dict[int, float],
                     launcher_pid: int | None = None) -> str:
    """Name the first process that went wrong: the others usually fail because of it."""
    # (stopped by the launcher, when, tie rank, process)
    events: list[tuple[bool, float, int, status.ProcessStatus]] = []
    for p in procs:
        if p.state == status.FAILED:
            events.append((False, p.time, 2, p))
        elif p.state == status.RUNNING and p.pid in seen_dead:
            # It died up to one poll before it was seen; on a tie it is the likelier cause,
            # unless its log shows it crashed (peers crash when a process vanishes; one killed
            # outright leaves no report). One the launcher itself terminated was stopped
            # because another failed: that one is named, whenever the death was seen.
            tail = log_tail(log_dir / log_name(p.role, p.index))
            stopped = launcher_pid is not None and signal_sender(tail) == launcher_pid
            events.append((stopped, seen_dead[p.pid] - POLL_S - 0.05,
                           1 if crash_reported(tail) else 0, p))
    if events:
        *_, p = min(events, key=lambda e: e[:3])
        log_file = log_dir / log_name(p.role, p.index)
        if p.state == status.FAILED:
            return f"{p.name} failed: {p.message}; log: {log_file}"
        return (f"{p.name} (pid {p.pid}) died without finishing (killed or crashed); "
                f"log: {log_file}")
    seen = {(p.role, p.index) for p in procs}
    missing = [(r, i) for r, n in expected.items() for i in range(n) if (r, i) not in seen]
    if missing:
        r, i = missing[0]
        return (f"{r} {i} exited before it started training (launcher exit code {rc}); "
                f"log: {log_dir / log_name(r, i)}")
    return f"paddle.distributed.launch exited with code {rc}; logs: {log_dir}"


LISTEN_FAILED = "Fail to listen"  # brpc's line when a server's port is taken


def server_not_listening(log_dir: Path, servers: int) -> str:
    """A one-line failure when a parameter server's log says it could not bind its port."""
    for index in range(servers):
        log_file = log_dir / log_name("server", index)
        try:
            text = log_file.read_text(errors="replace")
        except OSError:
            continue
        if LISTEN_FAILED in text:
            line = next(x for x in text.splitlines() if LISTEN_FAILED in x)
            return (f"server {index} could not listen ({' '.join(line.split())[-120:]}): its "
                    f"port was taken by another process; run the job again; log: {log_file}")
    return ""


def log_tail(log_file: Path, size: int = 8192) -> bytes:
    """The end of a process's log (b"" when it cannot be read)."""
    try:
        with open(log_file, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read()
    except OSError:
        return b""


def crash_reported(tail: bytes) -> bool:
    """Whether a log's tail ends with a crash report (Paddle's fatal-signal handler)."""
    return b"FatalError" in tail or b"terminate called" in tail


# Paddle's fatal-signal handler: "*** SIGTERM (@0x125f) received by PID 4721 (TID 0x7f..) from
# PID 4703 ***".
SIGNAL_REPORT = re.compile(rb"received by PID \d+ \(TID \w+\) from PID (\d+)")


def signal_sender(tail: bytes) -> int | None:
    """The pid that sent the signal a log's crash report names, if it names one."""
    found = SIGNAL_REPORT.findall(tail)
    return int(found[-1]) if found else None


def newest_mtime(dirs: list[Path]) -> float:
    newest = 0.0
    for d in dirs:
        try:
            for entry in os.scandir(d):
                newest = max(newest, entry.stat().st_mtime)
        except OSError:
            pass
    return newest


def stop(proc: subprocess.Popen, out: Path) -> None:
    """Terminate the launcher's whole process group and any process that left it."""
    pids = [p.pid for p in status.read_all(out) if status.pid_alive(p.pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline:
            if proc.poll() is not None and not any(status.pid_alive(p) for p in pids):
                return
            time.sleep(POLL_S)
    proc.wait(timeout=KILL_GRACE_S)


def launch(cfg: RootConfig) -> dict[str, Any]:
    """Run the job to completion (restarting it as configured); the writer's summary."""
    from recrunner.fleet.ps import check_sync_mode, oversubscribed

    check_sync_mode(cfg)
    crowded = oversubscribed(cfg, len(os.sched_getaffinity(0)))
    if crowded:
        print(f"recrun train: warning: {crowded}", file=sys.stderr, flush=True)
    out = Path(cfg.runner.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # Before any process starts; each trainer checks the model fingerprint itself.
    checkpoint.to_resume(out, cfg.runner.resume)
    if str(cfg.mode.name) == "ps" and not cfg.runner.online:
        from recrunner.fleet.slots import convert_for_trainers

        convert_for_trainers(local_run_config(cfg, out, cfg.runner.resume), out)
    summary_file = out / "summary.json"
    summary_file.unlink(missing_ok=True)
    resume = cfg.runner.resume
    attempts = cfg.mode.max_restarts + 1
    for attempt in range(attempts):
        ports = hung = 0
        again = ""
        while True:
            outcome = launch_once(cfg, out, resume, attempt, again)
            if outcome.not_formed and hung + 1 < FORM_TRIES:
                hung += 1
                again = f"-unformed{hung}"
                print(f"recrun train: {outcome.message}; the job had not formed (Paddle's PS "
                      "start-up hung): launching it again", file=sys.stderr, flush=True)
                continue
            if not outcome.port_taken or ports + 1 >= PORT_TRIES:
                break
            ports += 1
            again = f"-ports{ports}"
            print(f"recrun train: {outcome.message}; launching again on other ports",
                  file=sys.stderr, flush=True)
        if outcome.ok:
            return json.loads(summary_file.read_text())
        if attempt + 1 < attempts:
            last = checkpoint.latest(out, verify=True)
            print(f"recrun train: {str(cfg.mode.name)} job failed: {outcome.message}; restarting "
                  f"({attempt + 1}/{cfg.mode.max_restarts}) from "
                  f"{'checkpoint ' + str(last.epoch) if last else 'the start'}",
                  file=sys.stderr, flush=True)
            resume = True
    raise DistError(f"{str(cfg.mode.name)} job failed: {outcome.message}"
                    + (f" (after {cfg.mode.max_restarts} restarts)" if cfg.mode.max_restarts
                       else "; runner.resume=true continues from the last checkpoint"))


def launch_once(cfg: RootConfig, out: Path, resume: bool, attempt: int, again: str = ""
                ) -> Outcome:
    """One launch of the job's processes, supervised to their end (`again`: its logs' suffix
    when launches before it in this attempt found a port taken (`-ports<n>`) or did not form
    (`-unformed<n>`); each launch has its own logs)."""
    run_cfg = local_run_config(cfg, out, resume)
    config_file = out / "dist" / "config.yaml"
    atomic.write_text(config_file, to_yaml(run_cfg), "config")
    log_dir = out / ("logs" if attempt == 0 else f"logs-restart{attempt}")
    if again:
        log_dir = log_dir.with_name(f"{log_dir.name}{again}")
    log_dir.mkdir(parents=True, exist_ok=True)
    status.clear(out)
    # An allow-listed environment, credentials through a private file: Paddle's launcher
    # writes the environment it is given into the run's logs.
    with open(log_dir / "launch.log", "w") as launch_log, \
            job_env.handed_over(child_env(run_cfg), job_env.needed_names(cfg)) as env:
        proc = subprocess.Popen(launch_command(cfg, config_file, log_dir),
                                env=env, cwd=config_file.parent,
                                stdout=launch_log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            with trainers_stop_on_signal(out, run_cfg.runner.follow):
                outcome = supervise(proc, run_cfg, log_dir)
        finally:
            if proc.poll() is None or any(status.pid_alive(p.pid)
                                          for p in status.read_all(out)):
                stop(proc, out)
    return outcome
