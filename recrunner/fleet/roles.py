"""This process's place in a fleet job, read from the environment that
`paddle.distributed.launch` or the Paddle Operator sets (no launcher needed in a pod)."""

import os
import socket
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from recrunner.errors import RecrunnerError

# Operator: TRAINING_ROLE and PADDLE_TRAINING_ROLE; paddle.distributed.launch (ps): PADDLE_ROLE.
ROLE_VARS = ("TRAINING_ROLE", "PADDLE_TRAINING_ROLE", "PADDLE_ROLE")
TRAINER = "TRAINER"
PSERVER = "PSERVER"


class DistError(RecrunnerError):
    """A fleet job could not start or did not finish."""

    exit_code = 1


@dataclass(frozen=True)
class Role:
    kind: str  # TRAINER or PSERVER
    index: int  # trainer rank, or server index
    trainers: list[str]  # trainer endpoints (may be empty in PS mode)
    servers: list[str]  # parameter server endpoints (PS mode)
    trainers_num: int

    @property
    def name(self) -> str:
        return f"{'trainer' if self.kind == TRAINER else 'server'} {self.index}"

    @property
    def is_server(self) -> bool:
        return self.kind == PSERVER


def in_fleet_job(env: Mapping[str, str] | None = None) -> bool:
    """True when a launcher or the operator started this process as part of a job."""
    env = os.environ if env is None else env
    return any(env.get(v) for v in ROLE_VARS) or "PADDLE_TRAINER_ENDPOINTS" in env


def parse_endpoints(value: str | None, var: str) -> list[str]:
    """`host:port,host:port` -> list; a malformed list is a one-line error."""
    if not value:
        return []
    out = []
    for item in value.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise DistError(f"{var}={value!r}: {item.strip()!r} is not host:port")
        out.append(f"{host}:{int(port)}")
    return out


def _int_env(env: Mapping[str, str], var: str, default: int | None = None) -> int:
    value = env.get(var)
    if value is None or value == "":
        if default is None:
            raise DistError(f"{var} is not set (needed by this fleet job's process)")
        return default
    try:
        return int(value)
    except ValueError:
        raise DistError(f"{var}={value!r} is not an integer") from None


def role_from_env(mode: str, env: Mapping[str, str] | None = None) -> Role:
    """Read and check the role variables; normalise them so Paddle's own readers agree."""
    env = os.environ if env is None else env
    kind = next((env[v].upper() for v in ROLE_VARS if env.get(v)), TRAINER)
    if kind not in (TRAINER, PSERVER):
        raise DistError(f"TRAINING_ROLE={kind!r}: expected TRAINER or PSERVER")
    trainers = parse_endpoints(env.get("PADDLE_TRAINER_ENDPOINTS"), "PADDLE_TRAINER_ENDPOINTS")
    servers = parse_endpoints(env.get("PADDLE_PSERVERS_IP_PORT_LIST"),
                              "PADDLE_PSERVERS_IP_PORT_LIST")
    trainers_num = _int_env(env, "PADDLE_TRAINERS_NUM", len(trainers) or None)
    if mode == "collective":
        if kind != TRAINER:
            raise DistError("mode=collective has no parameter servers, but this process's "
                            f"role is {kind}")
        if len(trainers) != trainers_num:
            raise DistError(f"PADDLE_TRAINER_ENDPOINTS lists {len(trainers)} endpoints but "
                            f"PADDLE_TRAINERS_NUM={trainers_num}")
        index = _int_env(env, "PADDLE_TRAINER_ID")
    else:
        if not servers:
            raise DistError("mode=ps needs PADDLE_PSERVERS_IP_PORT_LIST (the parameter "
                            "servers' host:port list); it is empty or unset")
        if kind == TRAINER:
            index = _int_env(env, "PADDLE_TRAINER_ID")
        else:
            index = server_index(env, servers)
    limit = trainers_num if kind == TRAINER else len(servers)
    if not 0 <= index < limit:
        raise DistError(f"{'PADDLE_TRAINER_ID' if kind == TRAINER else 'server index'}={index} "
                        f"is outside 0..{limit - 1}")
    return Role(kind, index, trainers, servers, trainers_num)


def server_index(env: Mapping[str, str], servers: list[str]) -> int:
    """A server is the entry of the list that is POD_IP:PADDLE_PORT (how Paddle finds it)."""
    me = f"{env.get('POD_IP', '')}:{env.get('PADDLE_PORT', '')}"
    if me in servers:
        return servers.index(me)
    raise DistError(f"this server's POD_IP:PADDLE_PORT ({me}) is not in "
                    f"PADDLE_PSERVERS_IP_PORT_LIST={','.join(servers)}")


def prepare_env(mode: str, role: Role, env: MutableMapping[str, str] | None = None) -> None:
    """Fill what a pod lacks and Paddle needs: the current endpoint, gloo on a CPU build."""
    env = os.environ if env is None else env
    env["TRAINING_ROLE"] = role.kind  # PaddleCloudRoleMaker reads only this one
    if mode == "collective":
        if not env.get("PADDLE_CURRENT_ENDPOINT"):
            # The operator gives each pod POD_IP and PADDLE_PORT, not the joined endpoint.
            env["PADDLE_CURRENT_ENDPOINT"] = (role.trainers[role.index] if not env.get("POD_IP")
                                              else f"{env['POD_IP']}:{env.get('PADDLE_PORT')}")
        env.setdefault("PADDLE_TRAINERS_NUM", str(role.trainers_num))


PORT_IN_USE = "is already in use"


def check_port_free(endpoint: str, what: str) -> None:
    """Fail in one line when this process's port is taken (Paddle would hang or abort)."""
    host, _, port = endpoint.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("" if host not in ("127.0.0.1", "localhost") else host, int(port)))
        except OSError as exc:
            raise DistError(f"{what} port {endpoint} {PORT_IN_USE} ({exc.strerror}); "
                            "free it or choose other ports") from None


def wait_for_port(endpoint: str, timeout_s: float, what: str) -> None:
    """Wait until `endpoint` accepts TCP connections, or fail in one line."""
    import time

    host, _, port = endpoint.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise DistError(f"{what} {endpoint} did not accept connections within "
                                f"{timeout_s:.0f}s (is it running? check the endpoint list)"
                                ) from None
            time.sleep(0.2)


def free_ports(n: int) -> list[int]:
    """n distinct free ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
