"""The etcd server an elastic job rendezvouses through: its address as Paddle's launcher can
take it, a local server in the run directory, its health, and the job's keys.

Key operations go through etcd's own v3 JSON gateway (HTTP), so this process needs neither
the `etcd3` client nor its protobuf workaround; the node launchers use `etcd3` themselves.
"""

import base64
import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recrunner.config.mode import etcd_host_port
from recrunner.fleet import job_env
from recrunner.fleet.roles import DistError, free_ports

INSTALL_HINT = ("install it with `apt-get install -y etcd-server` (Debian/Ubuntu) or from "
                "https://github.com/etcd-io/etcd/releases, or pass mode.elastic.etcd=HOST:PORT")
START_TIMEOUT_S = 20.0


def resolve_endpoint(spec: str) -> str:
    """`HOST:PORT` -> `IP:PORT`. Paddle 3.0's launcher parses `etcd://HOST:PORT` with
    str.strip("etcd://"), which also eats a host name's leading/trailing e, t, c, d, / or :
    characters (`etcd-0.etcd` -> `-0.`): an IP address survives, so names are resolved here
    (on this machine only: a pod resolves its own, see recrunner.k8s.elastic)."""
    try:
        host, port = etcd_host_port(spec.strip())
    except ValueError as exc:
        raise DistError(str(exc)) from None
    try:
        ip = str(ipaddress.IPv4Address(host))
    except ValueError:
        try:
            ip = socket.gethostbyname(host)
        except OSError as exc:
            raise DistError(f"mode.elastic.etcd={spec!r}: cannot resolve {host!r} ({exc})"
                            ) from None
    return f"{ip}:{port}"


def healthy(endpoint: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{endpoint}/health", timeout=timeout) as reply:
            return json.loads(reply.read()).get("health") == "true"
    except (OSError, ValueError):
        return False


@dataclass
class LocalEtcd:
    """An etcd server this run started (its data and log in <run>/dist/etcd)."""

    proc: subprocess.Popen
    endpoint: str
    log: Path

    @classmethod
    def start(cls, run_dir: Path) -> "LocalEtcd":
        binary = shutil.which("etcd")
        if binary is None:
            raise DistError(f"mode.elastic: no `etcd` binary on PATH to start a rendezvous "
                            f"server; {INSTALL_HINT}")
        root = run_dir / "dist" / "etcd"
        shutil.rmtree(root, ignore_errors=True)  # a previous run's members and keys
        root.mkdir(parents=True)
        client, peer = free_ports(2)
        endpoint = f"127.0.0.1:{client}"
        log = root / "etcd.log"
        with open(log, "w") as f:
            proc = subprocess.Popen(
                [binary, "--name", "recrunner", "--data-dir", str(root / "data"),
                 "--listen-client-urls", f"http://{endpoint}",
                 "--advertise-client-urls", f"http://{endpoint}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                 "--initial-cluster", f"recrunner=http://127.0.0.1:{peer}"],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=job_env.plain(os.environ), start_new_session=True)
        server = cls(proc, endpoint, log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not healthy(endpoint, 0.5):
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise DistError(f"the etcd server did not start (exit code {proc.poll()}); "
                                f"log: {log}")
            time.sleep(0.1)
        return server

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def launcher_job_id(job_id: str) -> str:
    """The --job_id the launchers get. Paddle deletes `/paddle/<id>` as a key prefix when a
    node registers, which would also wipe the keys of a job whose id merely starts with <id>
    (job `a` and job `ab` on one etcd): a terminator that job ids cannot contain prevents it."""
    return f"{job_id}~"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _text(b64: str) -> str:
    return base64.b64decode(b64).decode()


class Etcd:
    """etcd's v3 API through its JSON gateway: keys, prefixes, create-if-absent transactions
    and leases (a key put with a lease goes when the lease lapses). Hand-written over urllib:
    the `etcd3` client needs protobuf's pure-Python mode in every process that imports it."""

    def __init__(self, endpoint: str, timeout_s: float = 5.0) -> None:
        self.endpoint, self.timeout_s = endpoint, timeout_s

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(f"http://{self.endpoint}/v3/{path}",
                                     json.dumps(body).encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as reply:
                return dict(json.loads(reply.read()))
        except urllib.error.HTTPError as exc:  # e.g. a lease that lapsed: the caller decides
            detail = exc.read().decode(errors="replace")
            raise EtcdError(f"etcd server {self.endpoint}: {path}: {detail.strip()}") from None
        except (OSError, ValueError) as exc:
            raise EtcdError(f"etcd server {self.endpoint}: {path} failed ({exc})") from None

    @staticmethod
    def prefix_range(prefix: str) -> dict[str, str]:
        key = prefix.encode()
        end = key[:-1] + bytes([key[-1] + 1])  # every key starting with `prefix`
        return {"key": _b64(prefix), "range_end": base64.b64encode(end).decode()}

    def put(self, key: str, value: str, lease: int = 0) -> None:
        self.call("kv/put", {"key": _b64(key), "value": _b64(value), "lease": str(lease)})

    def get(self, key: str) -> str | None:
        kvs = self.call("kv/range", {"key": _b64(key)}).get("kvs", [])
        return _text(kvs[0].get("value", "")) if kvs else None

    def range(self, prefix: str) -> dict[str, str]:
        """Every key under `prefix` (the prefix cut off) and its value."""
        kvs = self.call("kv/range", self.prefix_range(prefix)).get("kvs", [])
        return {_text(kv["key"])[len(prefix):]: _text(kv.get("value", "")) for kv in kvs}

    def delete_prefix(self, prefix: str) -> int:
        return int(self.call("kv/deleterange", self.prefix_range(prefix)).get("deleted", 0))

    def create(self, key: str, value: str, lease: int = 0, absent: tuple[str, ...] = ()
               ) -> bool:
        """Put `key` only if neither it nor any key in `absent` exists (one transaction)."""
        compare = [{"key": _b64(k), "target": "CREATE", "create_revision": "0",
                    "result": "EQUAL"} for k in (key, *absent)]
        put = {"request_put": {"key": _b64(key), "value": _b64(value), "lease": str(lease)}}
        return bool(self.call("kv/txn", {"compare": compare, "success": [put]})
                    .get("succeeded"))

    def swap(self, key: str, expected: str, puts: dict[str, str], deletes: tuple[str, ...]
             ) -> bool:
        """If `key` holds `expected`: put `puts` and delete `deletes`, in one transaction."""
        compare = [{"key": _b64(key), "target": "VALUE", "value": _b64(expected),
                    "result": "EQUAL"}]
        ops: list[dict[str, Any]] = [
            {"request_put": {"key": _b64(k), "value": _b64(v)}} for k, v in puts.items()]
        ops += [{"request_delete_range": {"key": _b64(k)}} for k in deletes]
        return bool(self.call("kv/txn", {"compare": compare, "success": ops})
                    .get("succeeded"))

    def grant(self, ttl_s: float) -> int:
        return int(self.call("lease/grant", {"TTL": str(max(1, round(ttl_s)))})["ID"])

    def keepalive(self, lease: int) -> bool:
        """Renew `lease`; False once it has lapsed (its keys are gone)."""
        result = self.call("lease/keepalive", {"ID": str(lease)}).get("result", {})
        return int(result.get("TTL", 0)) > 0

    def revoke(self, lease: int) -> None:
        with contextlib.suppress(EtcdError):  # lapsed already
            self.call("lease/revoke", {"ID": str(lease)})


class EtcdError(DistError):
    """The etcd server could not be reached, or refused a request."""


class EtcdKeys:
    """The keys of one job (Paddle's launcher writes /paddle/<job>, /paddle/<job>/… and
    /<job>/…), `job_id` as the launchers got it."""

    def __init__(self, endpoint: str, job_id: str) -> None:
        self.endpoint, self.job_id = endpoint, job_id
        self.etcd = Etcd(endpoint)

    def prefixes(self) -> list[str]:
        return [f"/paddle/{self.job_id}", f"/{self.job_id}/"]  # the ids end with "~"

    def live_nodes(self) -> list[str]:
        """Nodes whose heartbeat (a 10 s lease) is current."""
        return list(self.etcd.range(f"/paddle/{self.job_id}/heartbeat/").values())

    def clear(self) -> int:
        """Delete the job's keys (a finished job's leftovers); how many there were."""
        return sum(self.etcd.delete_prefix(prefix) for prefix in self.prefixes())


def stop_quietly(server: LocalEtcd | None) -> None:
    if server is not None:
        with contextlib.suppress(OSError):
            server.stop()
