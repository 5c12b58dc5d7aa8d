"""The highest fraction of the GEMM-only limit a mode's training could reach on this machine,
whatever recrunner did: the CPU a model without dense layers (LR) spends per trained example
in that mode, plus the CPU the dense model's GEMMs alone need per example, against what the
machine's cores give at the goal's fraction.

    python benchmarks/fleet_floor.py [--rows 200000] [--model wide_deep] [--only ps-async-2,...]

Per mode and model, `recrun train` runs twice on the same rows, for 1 and for 3 epochs; the
CPU-seconds of the whole process tree (launcher, servers, trainers) of the two differ by two
epochs of training (and two evaluations of a 2,000-row test file, and two epochs' checkpoints):
that difference over 2 x rows is the mode's CPU per trained example, start-up, conversion and
export excluded. The GEMMs' CPU per example is `profile_train_step.py`'s limit at one thread
(one core does all of a GEMM's work). With `cores` cores, a mode whose sparse path alone costs
`floor` CPU-seconds per example cannot train the dense model faster than
cores / (floor + gemm) examples/s, so its fraction of the 2-thread limit is at most that over
the limit. LR's path is a subset of every zoo model's (the same slots, tables at least as wide,
the same data feed, servers and exchange), so its floor is a lower bound for theirs.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import quiet
from bench_modes import MODES, make_data, mode_names, run

HERE = Path(__file__).resolve().parent
TEST_ROWS = 2000


def tree_cpu() -> float:
    """CPU-seconds of every child process waited for so far (their own waited children too)."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


class RoleCpu(threading.Thread):
    """CPU-seconds of this process's descendants by their fleet role (TRAINING_ROLE: TRAINER,
    PSERVER; anything else, the launcher and `recrun` itself, as "other"), polled every
    POLL seconds: what a process spends after its last poll is not counted."""

    POLL = 0.05

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, tuple[str, float]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self.done.is_set():
            for child in me.children(recursive=True):
                try:
                    with child.oneshot():
                        times = child.cpu_times()
                        # Read until found: a child forked but not yet exec'd has its
                        # parent's environment.
                        role = self.seen.get(child.pid, ("other", 0.0))[0]
                        if role == "other":
                            role = child.environ().get("TRAINING_ROLE", "other")
                except psutil.Error:
                    continue
                self.seen[child.pid] = (role, times.user + times.system)
            time.sleep(self.POLL)

    def by_role(self) -> dict[str, float]:
        self.done.set()
        self.join()
        roles: dict[str, float] = {}
        for role, cpu in self.seen.values():
            roles[role] = roles.get(role, 0.0) + cpu
        return roles


def epochs_cpu(mode: list[str], data: dict[str, str], out: Path, model: str,
               epochs: int) -> tuple[float, dict[str, float], dict]:
    before = tree_cpu()
    watch = RoleCpu()
    watch.start()
    result = run(mode, data, out, epochs, model, env={**os.environ, quiet.CHILD: "1"})
    return tree_cpu() - before, watch.by_role(), result


def gemm_limit(model: str, threads: int) -> float:
    """profile_train_step.py's GEMM-only limit for `model` at `threads` threads, in a process
    of its own (Paddle's threads are set once a process)."""
    proc = subprocess.run([sys.executable, str(HERE / "profile_train_step.py"), "--steps", "5",
                           "--rounds", "3", f"model={model}", f"runner.threads={threads}"],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, quiet.CHILD: "1"})
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for row in rows:
        if row["bench"] == "gemm_limit":
            return float(row["examples_per_sec"])
    # Its last line names the cause (a config error, say); its traceback adds nothing here.
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise SystemExit(f"profile_train_step.py gave no limit for model={model}: {last}")


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--model", default="wide_deep", help="the dense model to bound")
    parser.add_argument("--only", default="local,collective-2,ps-async-2,ps-geo-2")
    args = parser.parse_args()
    if args.rows < 1:
        parser.error("--rows must be at least 1")
    names = mode_names(parser, args.only)
    cores = os.cpu_count() or 1
    limit_2, limit_1 = gemm_limit(args.model, 2), gemm_limit(args.model, 1)
    gemm = 1 / limit_1  # CPU-seconds of GEMM per example
    print(json.dumps({"bench": "gemm", "model": args.model, "limit_2_threads": round(limit_2),
                      "limit_1_thread": round(limit_1),
                      "gemm_cpu_us_per_example": round(gemm * 1e6, 2)}), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_data(root, args.rows, TEST_ROWS)
        for name in names:
            per_model, trainers = {}, {}
            for model in ("lr", args.model):
                one, roles_1, r1 = epochs_cpu(MODES[name], data, root / f"{name}-{model}-1",
                                              model, 1)
                three, roles_3, r3 = epochs_cpu(MODES[name], data, root / f"{name}-{model}-3",
                                                model, 3)
                per_model[model] = (three - one) / (2 * args.rows)
                roles = {role: (roles_3.get(role, 0.0) - roles_1.get(role, 0.0))
                         / (2 * args.rows) for role in {*roles_1, *roles_3}}
                # mode=local and collective workers have no TRAINING_ROLE: all "other".
                trainers[model] = roles.get("TRAINER", per_model[model])
                print(json.dumps({"bench": "mode_cpu", "mode": name, "model": model,
                                  "cpu_s_1_epoch": round(one, 2), "cpu_s_3_epochs": round(three, 2),
                                  "cpu_us_per_example": round(per_model[model] * 1e6, 2),
                                  "by_role_cpu_us_per_example":
                                      {k: round(v * 1e6, 2) for k, v in sorted(roles.items())},
                                  "examples_per_sec_1_epoch": round(r1["examples_per_sec"]),
                                  "auc_3_epochs": round(r3["auc"], 4)}), flush=True)
            floor, trainer_floor = per_model["lr"], trainers["lr"]
            best, best_trainers = cores / (floor + gemm), cores / (trainer_floor + gemm)
            print(json.dumps({"bench": "mode_floor", "mode": name, "cores": cores,
                              "lr_cpu_us_per_example": round(floor * 1e6, 2),
                              "max_examples_per_sec": round(best),
                              "max_fraction_of_limit": round(best / limit_2, 3),
                              # The servers on cores of their own (other machines): what the
                              # trainers alone could reach on this machine's cores.
                              "lr_trainers_cpu_us_per_example": round(trainer_floor * 1e6, 2),
                              "max_fraction_trainers_alone": round(best_trainers / limit_2, 3),
                              f"{args.model}_cpu_us_per_example":
                                  round(per_model[args.model] * 1e6, 2)}), flush=True)


if __name__ == "__main__":
    main()
