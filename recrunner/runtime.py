"""Process-wide Paddle set-up, done once before paddle is imported."""

import gc
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType


def mkl_cpu_type(cpuinfo: str) -> str | None:
    """The MKL_DEBUG_CPU_TYPE that makes Paddle's bundled MKL use the widest vector code an AMD
    CPU runs (it picks its slow generic GEMM on AMD unless told): 7 = AVX-512, 5 = AVX2."""
    if "AuthenticAMD" not in cpuinfo:
        return None
    flags = next((line.split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= set(flags):
        return "7"  # MKL's AVX-512 kernels are Skylake-X's: they need all five
    return "5" if "avx2" in flags else None


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read(8192)  # the first CPU's entry
    except OSError:
        return ""


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a block that builds many long-lived objects, and
    what the block built left out of every later collection (`gc.freeze`).

    Paddle's import leaves ~150,000 objects the collector tracks (modules, classes,
    functions), and its full passes walk them again and again while the import builds them.
    Alternating runs, medians (AMD EPYC family 25 model 1): a process that loads a run's config,
    imports Paddle and ends with os._exit, as recrunner's do, 2.71 -> 2.43 CPU-s; Paddle's
    launcher (its import and a normal exit, which then skips the frozen objects) 1.57 -> 1.23.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.freeze()


def import_paddle(threads: int | None = None, static: bool = False) -> ModuleType:
    # Paddle's static fleet (PS mode) graph building fails under PIR in 3.0.0.
    if static:
        os.environ.setdefault("FLAGS_enable_pir_api", "0")
    if threads:
        # Idle OpenMP threads sleep at once instead of spinning 200 ms: with another busy
        # process, 2 spinning threads trained 1.55x slower than 1; sleeping, as fast as 1.
        os.environ.setdefault("KMP_BLOCKTIME", "0")
    cpu_type = mkl_cpu_type(_cpuinfo())
    if cpu_type:
        # GEMM on the 2-core EPYC (Zen 5): generic 56 GFLOP/s, AVX2 191, AVX-512 340.
        os.environ.setdefault("MKL_DEBUG_CPU_TYPE", cpu_type)
    os.environ.setdefault("GLOG_minloglevel", "2")
    warnings.filterwarnings("ignore", message="No ccache found")
    # Paddle's import sets the root logger to WARNING, which would hide recrunner's INFO
    # lines (evaluations, checkpoints, the export) from the console and train.log.
    root = logging.getLogger()
    level = root.level
    with gc_paused():
        import paddle

    root.setLevel(level)

    if threads:
        # After the import: Paddle warns on stderr at import when OMP_NUM_THREADS > 1.
        paddle.base.core.set_num_threads(threads)
    return paddle
