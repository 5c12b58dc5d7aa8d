#!/usr/bin/env bash
# What a user of the wheel gets: build it from this checkout, install it into a fresh venv, and
# from an empty folder train a tiny model and render a job (CRD check included). The venv sees
# the packages of $PYTHON (a .pth file: --system-site-packages alone would show a venv's base
# interpreter's instead), so Paddle is not downloaded again; the check fails if recrunner, its
# configs or its zoo are imported from anywhere but the wheel.
#
#   [PYTHON=python] tools/check_wheel.sh [LOG]   # LOG: the steps' output (default: a temp file)
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
LOG=${1:-$WORK/check_wheel.log}
PY=${PYTHON:-python3}
: > "$LOG"
step() { echo "check_wheel: $*" | tee -a "$LOG"; }
fail() {
  echo "check_wheel: FAILED: $*; last lines of $LOG:" >&2
  tail -n 30 "$LOG" >&2
  exit 1
}
cleanup() { rm -rf "$WORK/src" "$WORK/venv"; }
trap cleanup EXIT

# Build from a copy of the tracked (and new, unignored) files: an in-tree build would leave
# build/ behind, whose stale files later wheels would pick up.
step "building the wheel"
mkdir "$WORK/src" "$WORK/dist"
if git -C "$REPO" rev-parse --git-dir > /dev/null 2>&1; then
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard \
    | tar --null -T - --ignore-failed-read -cf - 2>> "$LOG") | tar -xf - -C "$WORK/src"
else
  cp -a "$REPO/." "$WORK/src"
fi
"$PY" -m pip wheel --no-deps -q -w "$WORK/dist" "$WORK/src" >> "$LOG" 2>&1 || fail "pip wheel"
WHEEL=$(ls "$WORK"/dist/recrunner-*.whl)

step "installing $(basename "$WHEEL") into a fresh venv"
"$PY" -m venv --system-site-packages "$WORK/venv" >> "$LOG" 2>&1 || fail "python -m venv"
VPY="$WORK/venv/bin/python"
# $PY's site directories after the venv's own (addsitedir: their .pth files are read too).
SITES=$("$PY" -c 'import site; print([*site.getsitepackages(), site.getusersitepackages()])')
VSITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; list(map(site.addsitedir, $SITES))" > "$VSITE/_check_wheel_env.pth"
# --force-reinstall: an editable recrunner of the same version outside the venv is not this.
"$VPY" -m pip install -q --force-reinstall --no-deps "$WHEEL" >> "$LOG" 2>&1 \
  || fail "pip install of the wheel"
# Its dependencies must be met (by the environment the venv sees, or the registry).
"$VPY" -m pip install -q "$WHEEL" >> "$LOG" 2>&1 || fail "the wheel's dependencies"

RUN=$(mktemp -d)
cd "$RUN"
step "importing from $RUN"
"$VPY" - "$WORK/venv" >> "$LOG" 2>&1 <<'EOF' || fail "recrunner is not imported from the wheel"
import sys
from pathlib import Path

import recrunner
import recrunner.zoo
from recrunner.k8s.crd_schemas import default_crd_dir
from recrunner.models import model_names

venv = Path(sys.argv[1]).resolve()
for what, path in [("recrunner", recrunner.__file__), ("recrunner.zoo", recrunner.zoo.__file__),
                   ("conf", recrunner.CONF_DIR), ("CRDs", default_crd_dir())]:
    assert venv in Path(path).resolve().parents, f"{what} comes from {path}, not the wheel"
assert (recrunner.CONF_DIR / "config.yaml").is_file(), recrunner.CONF_DIR
assert {"wide_deep", "deepfm"} <= set(model_names()), model_names()
print("imports from the wheel:", recrunner.__file__)
EOF

step "training a tiny model in $RUN"
"$WORK/venv/bin/recrun" train +mode=local model.sparse_feature_number=1009 model.fc_sizes=[16] \
  dataset.synth.train_rows=2000 dataset.synth.test_rows=500 runner.epochs=1 \
  runner.progress=false >> "$LOG" 2>&1 || fail "recrun train"
"$VPY" - >> "$LOG" 2>&1 <<'EOF' || fail "the run directory is incomplete"
import json
from pathlib import Path

summary = json.loads(Path("runs/wide_deep/summary.json").read_text())
export = Path(summary["export_dir"])
assert export.is_dir() and any(export.iterdir()), f"no export in {export}"
assert Path("data/synth/criteo/train.txt").is_file(), "the synthetic data was not generated here"
print("summary:", summary)
EOF

step "rendering a job against the packaged CRDs"
"$WORK/venv/bin/recrun" submit cluster=k8s cluster.image=registry.example.com/recrunner:0.1 \
  mode=ps cluster.juicefs.create_secret=false cluster.juicefs.secret_name=jfs --dry-run \
  > job.yaml 2> submit.err || { cat submit.err >> "$LOG"; fail "recrun submit --dry-run"; }
cat submit.err >> "$LOG"
grep -q "^kind: PaddleJob" job.yaml || fail "no PaddleJob rendered"
if grep -q "CRD schema check skipped" submit.err; then fail "the CRD check was skipped"; fi

step "a gated pipeline from the wheel: train, gate, promote, smoke through a server"
PORT=$("$VPY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$WORK/venv/bin/recrun" pipeline +mode=local model.sparse_feature_number=1009 model.fc_sizes=[16] \
  dataset.synth.train_rows=2000 dataset.synth.test_rows=500 runner.epochs=1 runner.progress=false \
  runner.output_dir=runs/pipeline serving.model_dir=served serving.port="$PORT" \
  pipeline.max_p99_ms=1000 > pipeline.out 2>> "$LOG" || { cat pipeline.out >> "$LOG"; fail "recrun pipeline"; }
cat pipeline.out >> "$LOG"
grep -q "^pipeline: promoted" pipeline.out || fail "the pipeline did not promote"

step "rendering the pipeline's Argo Workflow against the packaged CRDs"
"$WORK/venv/bin/recrun" pipeline cluster=k8s cluster.image=registry.example.com/recrunner:0.1 \
  cluster.juicefs.create_secret=false cluster.juicefs.secret_name=jfs --dry-run \
  > workflow.yaml 2> workflow.err || { cat workflow.err >> "$LOG"; fail "recrun pipeline --dry-run"; }
grep -q "^kind: Workflow" workflow.yaml || fail "no Workflow rendered"
if grep -q "CRD schema check skipped" workflow.err; then fail "the Workflow's CRD check was skipped"; fi

cd / && rm -rf "$RUN"
step "ok: the wheel installs and runs from any folder (log: $LOG)"
