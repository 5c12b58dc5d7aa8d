"""Builds ops.cc once per machine and registers its operators in this process.

Paddle's own `cpp_extension.load` compiles a custom operator and imports it, but it runs a
setuptools subprocess on every call (2 s a process even when nothing changed). So the build
runs it once, in a child process whose output goes to a log file, into a folder of Paddle's
extension directory (`PADDLE_EXTENSION_DIR`, default ~/.cache/paddle_extensions) named by a
hash of the source, the flags, Paddle's version and this CPU; every later process only
registers the built library (10 ms). Processes that start together (a fleet job's workers,
the test suite's) wait on one lock file for one build.

The flags target the CPU the process runs on (-march=native: a ReLU's mask is a blend with
AVX2, a mispredicted branch per value without); the CPU's model and flags are in the hash,
so a home folder shared with another kind of machine gets a build of its own.

A build that fails (no C++ compiler, say) is recorded beside its log and not retried until
the source, the flags, Paddle or the CPU change (or the folder is removed); training then
runs Paddle's plain operators, at their speed, with the same results (tests/test_kernels.py).
"""

import fcntl
import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

from recrunner.fleet.job_env import is_plain

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("ops.cc")
# -ffp-contract=off: no fused multiply-adds the plain operators would not do either. -g0:
# Python's own flags ask for debug information, a third of the build's time (19 s vs 14 s).
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-g0")
BUILD_TIMEOUT_S = 600
# The child: Paddle's builder, verbose into the log.
_BUILD = ("import sys\n"
          "from paddle.utils.cpp_extension import load\n"
          "load(name=sys.argv[1], sources=[sys.argv[2]], build_directory=sys.argv[3],\n"
          "     extra_cxx_cflags=sys.argv[4:], verbose=True)\n")


def _cpu() -> str:
    """This CPU's model name and feature flags (what -march=native compiles for)."""
    try:
        with open("/proc/cpuinfo") as f:
            head = f.read(8192)
    except OSError:
        return ""
    return "\n".join(line for line in head.splitlines()
                     if line.startswith(("model name", "flags")))


def _name(paddle_version: str) -> str:
    digest = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(FLAGS).encode(), paddle_version.encode(),
                 _cpu().encode()):
        digest.update(hashlib.sha256(part).digest())
    return f"recrunner_ops_{digest.hexdigest()[:16]}"


def _compile(name: str, root: Path) -> str | None:
    """Build into root/<name>/ (Paddle's layout); None, or why it failed (one line, naming
    the log)."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / "build.log"
    # The compiler's environment from the jobs' allow-list (and the compiler's own names):
    # nothing else of this process's environment reaches it.
    env = {k: v for k, v in os.environ.items() if is_plain(k) or k in ("CC", "CXX")}
    with open(log_path, "wb") as out:
        try:
            done = subprocess.run(
                [sys.executable, "-c", _BUILD, name, str(SOURCE), str(root), *FLAGS],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                timeout=BUILD_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc} (log: {log_path})"
    if done.returncode != 0 or not (folder / f"{name}.so").is_file():
        return f"the C++ build exited {done.returncode} (log: {log_path})"
    return None


def build_and_register(paddle_version: str) -> Path | str:
    """Register the operators, building them first if this machine has no build yet.
    Returns the built library, or why they are not available (one line)."""
    from paddle.utils.cpp_extension import get_build_directory, load_op_meta_info_and_register_op

    name = _name(paddle_version)
    try:
        root = Path(get_build_directory())
        folder = root / name
        library, failed = folder / f"{name}.so", folder / "FAILED"
        with open(root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build; the others wait for it
            if not library.is_file() and not failed.is_file():
                log.info("building recrunner's fused CPU kernels for this machine (once, "
                         "about 15 s): %s", folder)
                why = _compile(name, root)
                if why is not None:
                    failed.write_text(why + "\n")
        if failed.is_file():
            return failed.read_text().strip() + f"; remove {folder} to try again"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    load_op_meta_info_and_register_op(str(library))
    return library
