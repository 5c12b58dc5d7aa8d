"""A/B paddle2onnx's constant folding (polygraphy, its default) against none, on one export:
conversion time, ONNX Runtime's outputs and its batch-256 latency, interleaved, medians.

    python benchmarks/ab_onnx_fold.py <export dir> [--rounds 7] [--batch 256]

recrunner converts without folding (`engines.onnx_file`): ONNX Runtime folds the same
constants itself when it loads the file. This shows that costs nothing at inference.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import quiet

TOOLS = ("polygraphy", "none")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    quiet.guard(ap)
    ap.add_argument("export", type=Path)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--calls", type=int, default=50, help="runs per round and side")
    args = ap.parse_args()

    import onnx
    import onnxruntime as ort
    import paddle2onnx

    from recrunner.export.check import Probe
    from recrunner.export.engines import MODEL_PREFIX
    from recrunner.export.load import read_meta
    from recrunner.export.spec import input_names

    names = input_names(read_meta(args.export))
    probe = Probe.load(args.export / "probe.npz", names)
    tmp = Path(tempfile.mkdtemp(prefix="ab_onnx_fold-"))
    convert: dict[str, list[float]] = {t: [] for t in TOOLS}
    for _ in range(2):  # the first polygraphy call also imports onnx and polygraphy
        for tool in TOOLS:
            start = time.perf_counter()
            paddle2onnx.export(str(args.export / f"{MODEL_PREFIX}.json"),
                               str(args.export / f"{MODEL_PREFIX}.pdiparams"),
                               str(tmp / f"{tool}.onnx"), opset_version=13, optimize_tool=tool)
            convert[tool].append(time.perf_counter() - start)

    sessions = {}
    for tool in TOOLS:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        sessions[tool] = ort.InferenceSession(str(tmp / f"{tool}.onnx"), opts,
                                              providers=["CPUExecutionProvider"])
    probe_out = {t: s.run(None, dict(zip(names, probe.inputs, strict=True)))[0].ravel()
                 for t, s in sessions.items()}
    feeds = {n: np.resize(a, (args.batch, *a.shape[1:]))
             for n, a in zip(names, probe.inputs, strict=True)}
    ms: dict[str, list[float]] = {t: [] for t in TOOLS}
    for _ in range(args.rounds):
        for tool, session in sessions.items():
            start = time.perf_counter()
            for _ in range(args.calls):
                session.run(None, feeds)
            ms[tool].append(1000 * (time.perf_counter() - start) / args.calls)

    print(f"export {args.export}, batch {args.batch}, {args.rounds} rounds x {args.calls} calls")
    print("| optimize_tool | nodes | convert s (2nd call) | ms per batch (median) |")
    print("|---|---:|---:|---:|")
    for tool in TOOLS:
        nodes = len(onnx.load(str(tmp / f"{tool}.onnx")).graph.node)
        print(f"| {tool} | {nodes} | {convert[tool][1]:.2f} | {statistics.median(ms[tool]):.3f} |")
    diff = float(np.abs(probe_out["polygraphy"] - probe_out["none"]).max())
    print(f"largest difference between the two on the probe: {diff:.3g}")


if __name__ == "__main__":
    main()
