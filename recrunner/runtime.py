"""Process-wide Paddle set-up, done once before paddle is imported."""

import os
import warnings
from types import ModuleType


def _amd_cpu() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return "AuthenticAMD" in f.read(4096)
    except OSError:
        return False


def import_paddle(threads: int | None = None, static: bool = False) -> ModuleType:
    # Paddle's static fleet (PS mode) graph building fails under PIR in 3.0.0.
    if static:
        os.environ.setdefault("FLAGS_enable_pir_api", "0")
    if threads:
        # Idle OpenMP threads sleep at once instead of spinning 200 ms: with another busy
        # process, 2 spinning threads trained 1.55x slower than 1; sleeping, as fast as 1.
        os.environ.setdefault("KMP_BLOCKTIME", "0")
    if _amd_cpu():
        # Paddle's bundled MKL picks its slow generic GEMM on AMD CPUs unless told the CPU does
        # AVX2: measured 1.66x faster Wide & Deep training on the 2-core EPYC CI machine.
        os.environ.setdefault("MKL_DEBUG_CPU_TYPE", "5")
    os.environ.setdefault("GLOG_minloglevel", "2")
    warnings.filterwarnings("ignore", message="No ccache found")
    import paddle

    if threads:
        # After the import: Paddle warns on stderr at import when OMP_NUM_THREADS > 1.
        paddle.base.core.set_num_threads(threads)
    return paddle
