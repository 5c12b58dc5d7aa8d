"""The sparse tier (serving.sparse.store=redis) on the default data, against the in-memory
server, in one run. Real redis-server processes, real `recrun train`, `publish` and `serve`.

    python benchmarks/bench_sparse.py passes     # 5 daily passes: delta/base sizes, publish
                                                 # time, then KV against in-memory serving
    python benchmarks/bench_sparse.py freshness  # _SUCCESS of a new day -> first reply by it
    python benchmarks/bench_sparse.py scale      # a 10,000,019-row table on 2 shards: RSS

Prints one JSON line per figure. Figures: docs/online.md.
"""

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import quiet

from recrunner.online import versions

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data" / "synth" / "criteo"
RECRUN = [sys.executable, "-m", "recrunner"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_nodes(n: int) -> tuple[list[subprocess.Popen], list[str]]:
    procs, nodes = [], []
    for _ in range(n):
        port = free_port()
        procs.append(subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                                       "--appendonly", "no"], stdout=subprocess.DEVNULL))
        nodes.append(f"127.0.0.1:{port}")
    time.sleep(0.5)
    return procs, nodes


def sparse_keys(nodes: list[str]) -> list[str]:
    return ["serving.sparse.store=redis", f"serving.sparse.shards=[{','.join(nodes)}]"]


def days(root: Path, rows_per_day: int, count: int) -> Path:
    with open(DATA / "train.txt", "rb") as src:
        for d in range(1, count + 1):
            folder = root / f"day={d}"
            folder.mkdir(parents=True)
            with open(folder / "part-00000.tsv", "wb") as out:
                for _ in range(rows_per_day):
                    out.write(src.readline())
            (folder / "_SUCCESS").write_bytes(b"")
    return root


def run(*args: str, **kw: Any) -> subprocess.CompletedProcess:
    proc = subprocess.run([*RECRUN, *args], cwd=REPO, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        sys.exit(f"recrun {args[0]} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def serve(keys: list[str], port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen([*RECRUN, "serve", f"serving.port={port}",
                             "serving.watch_interval_s=0.5", *keys], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=open(log, "w"))  # noqa: SIM115
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            sys.exit(f"recrun serve exited: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    sys.exit("recrun serve did not become ready")


def peak_rss_by_role(proc: subprocess.Popen, poll_s: float = 0.5) -> dict[str, float]:
    """Poll `proc` and its descendants until it exits: the largest peak resident memory (MB,
    VmHWM) of each role: the PS servers, the trainers (the writer also writes the export),
    the rest."""
    peaks: dict[str, float] = {}
    while proc.poll() is None:
        for pid in descendants(proc.pid):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue  # gone meanwhile
            hwm = next((int(x.split()[1]) / 1024 for x in status.splitlines()
                        if x.startswith("VmHWM:")), 0.0)
            role = ("server" if b"ROLE=PSERVER" in environ else
                    "trainer" if b"ROLE=TRAINER" in environ else "other")
            peaks[role] = max(peaks.get(role, 0.0), hwm)
        time.sleep(poll_s)
    return {k: round(v) for k, v in sorted(peaks.items())}


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def test_rows(n: int) -> list[bytes]:
    with open(DATA / "test.txt", "rb") as f:
        return [f.readline().rstrip(b"\n").split(b"\t", 1)[1] for _ in range(n)]


def compare_serving(ports: dict[str, int], rounds: int = 2) -> None:
    """Batch 1 (8 connections) and batch 256 (2 connections), interleaved, medians."""
    from recrunner.serving import client

    rows = test_rows(4096)
    single = [client.predict_request([r]) for r in rows]
    batches = [client.predict_request(rows[i:i + 256]) for i in range(0, 4096, 256)]
    results: dict[str, dict[str, list[float]]] = {k: {"p50": [], "p99": [], "rps": [],
                                                      "rows_s": []} for k in ports}
    for _ in range(rounds):
        for name, port in ports.items():
            url = f"http://127.0.0.1:{port}"
            one = client.run_load(url, single, 4000, warmup=200, concurrency=8,
                                  keep=False).summary()
            many = client.run_load(url, batches, 200, warmup=16, concurrency=2,
                                   keep=False).summary()
            assert one["errors"] == 0 and many["errors"] == 0, (one, many)
            results[name]["p50"].append(one["p50_ms"])
            results[name]["p99"].append(one["p99_ms"])
            results[name]["rps"].append(one["requests_per_s"])
            results[name]["rows_s"].append(many["rows_per_s"])
    med = {k: {m: float(np.median(v)) for m, v in r.items()} for k, r in results.items()}
    for name, figures in med.items():
        print(json.dumps({"bench": "sparse_serving", "server": name,
                          "batch1_p50_ms": round(figures["p50"], 2),
                          "batch1_p99_ms": round(figures["p99"], 2),
                          "batch1_requests_per_s": round(figures["rps"]),
                          "batch256_rows_per_s": round(figures["rows_s"])}), flush=True)
    kv, mem = med["redis"], med["memory"]
    print(json.dumps({"bench": "sparse_serving_ratio",
                      "batch256_rows_s_kv_over_memory": round(kv["rows_s"] / mem["rows_s"], 2),
                      "batch1_p99_kv_over_memory": round(kv["p99"] / mem["p99"], 2)}),
          flush=True)


def passes(tmp: Path, opts: argparse.Namespace) -> None:
    data = days(tmp / "data", opts.rows_per_day, opts.days)
    out = tmp / "run"
    t0 = time.time()
    run("train", f"dataset.train={data}/day=*", "runner.online=true",
        f"runner.base_every={opts.days}", f"runner.output_dir={out}")
    print(json.dumps({"bench": "sparse_train", "days": opts.days,
                      "rows_per_day": opts.rows_per_day, "wall_s": round(time.time() - t0, 1)}),
          flush=True)
    procs, nodes = redis_nodes(2)
    servers: list[subprocess.Popen] = []
    try:
        keys = sparse_keys(nodes)
        for v in range(1, opts.days + 1):
            record = json.loads((out / "versions" / str(v) / "manifest.json").read_text())
            t = time.time()
            run("publish", *keys, f"--run={out}", f"--version={v}")
            print(json.dumps({
                "bench": "sparse_version", "version": v, "kind": record["kind"],
                "rows_changed": record["rows_changed"], "rows_live": record["rows_live"],
                "table_bytes": sum(record["files"][name]["bytes"]
                                   for name in record.get("table_files", ["table.npz"])),
                "publish_s": round(time.time() - t, 2)}), flush=True)
        ports = {"redis": free_port(), "memory": free_port()}
        servers.append(serve(keys, ports["redis"], tmp / "kv.log"))
        servers.append(serve([f"serving.model_dir={out / 'export'}"], ports["memory"],
                             tmp / "mem.log"))
        compare_serving(ports)
        print(json.dumps({"bench": "sparse_rss_mb", "redis": round(rss_mb(servers[0].pid)),
                          "memory": round(rss_mb(servers[1].pid))}), flush=True)
    finally:
        for p in [*servers, *procs]:
            p.send_signal(signal.SIGTERM)
            p.wait()


def freshness(tmp: Path, opts: argparse.Namespace) -> None:
    """Train following a folder, publish following the run, serve from the nodes; then a new
    day lands: from its _SUCCESS to the first reply by its version."""
    data = days(tmp / "data", opts.rows_per_day, 1)
    out = tmp / "run"
    procs, nodes = redis_nodes(2)
    keys = sparse_keys(nodes)
    run("train", f"dataset.train={data}/day=*", "runner.online=true",
        f"runner.output_dir={out}")
    run("publish", *keys, f"--run={out}")
    port = free_port()
    children = [serve(keys, port, tmp / "kv.log")]
    children.append(subprocess.Popen(
        [*RECRUN, "train", f"dataset.train={data}/day=*", "runner.online=true",
         "runner.resume=true", "runner.follow=true", "runner.follow_interval_s=2",
         f"runner.output_dir={out}"], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=open(tmp / "train.log", "w")))  # noqa: SIM115
    children.append(subprocess.Popen(
        [*RECRUN, "publish", *keys, f"--run={out}", "--follow", "--interval=2"], cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=open(tmp / "publish.log", "w")))  # noqa: SIM115
    try:
        time.sleep(10)  # both followers up
        row = test_rows(1)[0]
        folder = data / "day=2"
        folder.mkdir()
        with open(DATA / "train.txt", "rb") as src, open(folder / "part-00000.tsv", "wb") as f:
            for _ in range(opts.rows_per_day):  # day 1's rows
                src.readline()
            for _ in range(opts.rows_per_day):
                f.write(src.readline())
        (folder / "_SUCCESS").write_bytes(b"")
        landed = time.time()
        while time.time() - landed < 600:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("POST", "/predict", row + b"\n")
            resp = conn.getresponse()
            resp.read()
            if resp.getheader("X-Model-Version") == "2":
                break
            time.sleep(0.1)
        print(json.dumps({"bench": "sparse_freshness", "rows_in_day": opts.rows_per_day,
                          "success_to_first_reply_s": round(time.time() - landed, 1)}),
              flush=True)
    finally:
        for p in [*children, *procs]:
            p.send_signal(signal.SIGTERM)
            p.wait()


def distinct_ids(root: Path, rows: int, seed: int = 0) -> Path:
    """One partition of Criteo-format rows whose 26 categorical values are random 32-bit hex
    (nearly every value distinct), labels at the synthetic data's CTR."""
    rng = np.random.default_rng(seed)
    folder = root / "day=1"
    folder.mkdir(parents=True)
    with open(folder / "part-00000.tsv", "w") as out:
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            label = (rng.random(n) < 0.25).astype(int)
            dense = rng.integers(0, 100, (n, 13))
            cats = rng.integers(0, 2**32, (n, 26), dtype=np.uint64)
            for i in range(n):
                out.write("\t".join([str(label[i]), *map(str, dense[i]),
                                      *(f"{c:08x}" for c in cats[i])]) + "\n")
    (folder / "_SUCCESS").write_bytes(b"")
    return root


def scale(tmp: Path, opts: argparse.Namespace) -> None:
    """A table of 10,000,019 rows published to 2 shards; RSS of the KV-backed and the
    in-memory server, same predictions. mode=local: a fresh table's rows are all non-zero, so
    every row is a key. --mode ps: the servers hold only the rows pushed, so the data has
    --distinct-rows rows of random ids (26 each) hashed into a table of 2x that many ids:
    at least 10 million distinct rows are trained and published."""
    from recrunner.serving import client

    out = tmp / "run"
    if opts.mode == "ps":
        data = distinct_ids(tmp / "data", opts.distinct_rows)
        rows = 2 * opts.distinct_rows * 26 + 1
        mode = ["mode=ps", "mode.servers=1", "mode.trainers=2"]
    else:
        data = days(tmp / "data", opts.rows_per_day, 1)
        rows, mode = 10_000_019, []
    t0 = time.time()
    with open(tmp / "train.log", "w") as log:
        train = subprocess.Popen(
            [*RECRUN, "train", *mode, f"dataset.train={data}/day=*", "runner.online=true",
             f"model.sparse_feature_number={rows}", f"runner.output_dir={out}",
             f"dataset.test={DATA / 'test.txt'}"], cwd=REPO, stdout=log, stderr=log)
        peaks = peak_rss_by_role(train)
    if train.returncode != 0:
        sys.exit(f"recrun train exited {train.returncode}: "
                 f"{(tmp / 'train.log').read_text()[-2000:]}")
    trained = time.time() - t0
    live = versions.read_manifest(out, 1)["rows_live"]
    procs, nodes = redis_nodes(2)
    servers: list[subprocess.Popen] = []
    try:
        keys = sparse_keys(nodes)
        t = time.time()
        run("publish", *keys, f"--run={out}")
        published = time.time() - t
        ports = {"redis": free_port(), "memory": free_port()}
        servers.append(serve(keys, ports["redis"], tmp / "kv.log"))
        servers.append(serve([f"serving.model_dir={out / 'export'}"], ports["memory"],
                             tmp / "mem.log"))
        lines = test_rows(2048)
        probs = {}
        for name, port in ports.items():
            reqs = [client.predict_request(lines[i:i + 256]) for i in range(0, 2048, 256)]
            result = client.run_load(f"http://127.0.0.1:{port}", reqs, len(reqs))
            probs[name] = np.concatenate([result.predictions[i] for i in range(len(reqs))])
        table_mb = rows * 10 * 4 / 2**20
        print(json.dumps({
            "bench": "sparse_scale", "mode": opts.mode, "table_rows": rows,
            "rows_live": live, "table_mb": round(table_mb),
            "train_s": round(trained, 1), "publish_s": round(published, 1),
            "train_peak_rss_mb": peaks,
            "rss_mb_redis_backed": round(rss_mb(servers[0].pid)),
            "rss_mb_in_memory": round(rss_mb(servers[1].pid)),
            "redis_node_rss_mb": [round(rss_mb(p.pid)) for p in procs],
            "max_abs_diff": float(np.abs(probs["redis"] - probs["memory"]).max())}),
            flush=True)
    finally:
        for p in [*servers, *procs]:
            p.send_signal(signal.SIGTERM)
            p.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    quiet.guard(parser)
    parser.add_argument("what", choices=["passes", "freshness", "scale"])
    parser.add_argument("--days", type=int, default=5)
    parser.add_argument("--rows-per-day", type=int, default=160_000)
    parser.add_argument("--mode", choices=["local", "ps"], default="local")
    parser.add_argument("--distinct-rows", type=int, default=560_000)
    opts = parser.parse_args()
    os.environ[quiet.CHILD] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        {"passes": passes, "freshness": freshness, "scale": scale}[opts.what](Path(tmp), opts)


if __name__ == "__main__":
    main()
