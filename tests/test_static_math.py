"""mode=ps builds its program with recrunner.fleet.static_math's cheap caller lookup: the same
program and warnings as Paddle's own, without inspect.stack()."""

import json
import subprocess
import sys

from tests.conftest import REPO

# Run in a fresh process: mode=ps's legacy static graph needs PIR off from the import on.
SCRIPT = r"""
import inspect, json, warnings
from recrunner.config.compose import load
from recrunner.runtime import import_paddle

paddle = import_paddle(1, static=True)
paddle.enable_static()
from paddle.base.layers import math_op_patch
from recrunner.fleet.ps import build_graph
from recrunner.fleet.static_math import cheap_caller_lookup

calls = []
real_stack = inspect.stack
# Counted, and without the counter's own frame (Paddle reads stack()[1], its caller).
inspect.stack = lambda context=1: calls.append(1) or real_stack(context)[1:]
cfg = load(["mode=ps", "model=deepfm", "model.sparse_feature_number=1001",
            "model.sparse_feature_dim=4", "model.fc_sizes=[8]"])
warnings.simplefilter("always")
out = {}
for name in ("paddle", "cheap"):
    calls.clear()
    with warnings.catch_warnings(record=True) as seen, paddle.utils.unique_name.guard():
        if name == "cheap":
            with cheap_caller_lookup():
                graph = build_graph(cfg)
        else:
            graph = build_graph(cfg)
    out[name] = {"program": str(graph.main), "startup": str(graph.startup),
                 "stack_calls": len(calls),
                 "warnings": [str(w.message) for w in seen
                              if issubclass(w.category, DeprecationWarning)]}
out["restored"] = math_op_patch.inspect is inspect
print(json.dumps(out))
"""


def test_the_program_and_its_warnings_are_paddles_without_reading_the_stack() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    paddle, cheap = out["paddle"], out["cheap"]
    assert paddle["stack_calls"] > 0 and cheap["stack_calls"] == 0
    assert cheap["program"] == paddle["program"] and cheap["startup"] == paddle["startup"]
    # Each warning names the model's line (blocks.py, deepfm's net) as Paddle's own does.
    assert paddle["warnings"] and cheap["warnings"] == paddle["warnings"]
    assert all("models/rank/" in w.split("\n")[0] for w in cheap["warnings"])
    assert out["restored"]
