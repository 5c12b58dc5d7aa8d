"""Process set-up: MKL's code path on AMD CPUs, chosen from the CPU's flags."""

import subprocess
import sys

from recrunner.runtime import mkl_cpu_type

AVX512 = "avx512f avx512cd avx512bw avx512dq avx512vl"


def cpuinfo(vendor: str, flags: str) -> str:
    return f"processor\t: 0\nvendor_id\t: {vendor}\nflags\t\t: fpu sse2 avx fma {flags}\n\n"


def test_amd_cpus_get_the_widest_mkl_path_they_can_run() -> None:
    assert mkl_cpu_type(cpuinfo("AuthenticAMD", f"avx2 {AVX512} avx512_bf16")) == "7"
    # AVX-512 without all of Skylake-X's subsets would crash MKL's AVX-512 kernels.
    assert mkl_cpu_type(cpuinfo("AuthenticAMD", "avx2 avx512f avx512cd")) == "5"
    assert mkl_cpu_type(cpuinfo("AuthenticAMD", "sse4_2")) is None
    assert mkl_cpu_type(cpuinfo("GenuineIntel", f"avx2 {AVX512}")) is None  # MKL detects Intel
    assert mkl_cpu_type("") is None


def test_matmul_on_the_chosen_path_matches_numpy() -> None:
    code = """
import numpy as np
from recrunner.runtime import import_paddle
paddle = import_paddle(2)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((300, 273), "float32"), rng.standard_normal((273, 129), "float32")
got = paddle.matmul(paddle.to_tensor(a), paddle.to_tensor(b)).numpy()
print(float(np.abs(got - a.astype("float64") @ b).max()))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.split()[-1]) < 1e-3


def test_paddle_is_imported_with_the_collector_paused_and_its_objects_frozen() -> None:
    code = """
import gc
from recrunner.runtime import gc_paused, import_paddle
import_paddle()
print(gc.isenabled(), gc.get_freeze_count())
gc.disable()
with gc_paused():
    pass
print(gc.isenabled())
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = proc.stdout.splitlines()[-2:]
    enabled, frozen = first.split()
    # On again after the import; Paddle's modules and classes (~150,000 objects) kept out of
    # every later collection. A collector that was off stays off.
    assert enabled == "True" and int(frozen) > 100_000
    assert second == "False"


def test_the_launcher_module_is_paddles_launcher() -> None:
    from recrunner.fleet import paddle_launch

    proc = subprocess.run([*paddle_launch.command(), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Paddle's own argument parser: its options, under its own groups.
    assert "--nproc_per_node" in proc.stdout and "--master" in proc.stdout
    assert "Elastic Parameters" in proc.stdout
