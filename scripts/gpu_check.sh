#!/usr/bin/env bash
# The GPU checks a session with a lent CUDA machine runs, in one go (bench/RESULTS.md, "On a
# GPU"): the learner suite on CUDA (updates/s and where each update's time goes), then a
# real `apex train` on Pong with the CUDA learner (threaded replay I/O, pinned memory,
# non-blocking copies) for PONG_SECONDS, its curve and metrics copied to OUT_DIR.
#
#   OUT_DIR=/tmp/gpu PONG_SECONDS=300 PONG_ACTORS=10 bash scripts/gpu_check.sh
#
# Run from the repository root with the project importable (an installed .venv, or
# PYTHONPATH holding the root and its dependencies). DEVICE=cpu runs the same steps on the
# CPU, to try the script where no GPU is. On a machine that got the tree without its .git,
# set APEX_GIT_COMMIT to the commit sent, so that the records name it (as stated).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT_DIR:-/tmp/gpu-check}
DEVICE=${DEVICE:-cuda}
PONG_SECONDS=${PONG_SECONDS:-300}
PONG_ACTORS=${PONG_ACTORS:-10}
PONG_SHARDS=${PONG_SHARDS:-2}
LEARNER_REPEATS=${LEARNER_REPEATS:-3}
LEARNER_OPTIONS=${LEARNER_OPTIONS:-}  # e.g. --quick, to try the script on a CPU
PYTHON=${PYTHON:-python3}
RUN_DIR=${RUN_DIR:-/tmp/gpu-check-pong}
mkdir -p "$OUT_DIR"
export PYTHONUNBUFFERED=1

echo "== machine $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
nproc
"$PYTHON" -c "import torch, zmq, gymnasium, ale_py, numba, lz4; print('torch', torch.__version__,
'cuda', torch.version.cuda, torch.cuda.is_available(), 'zmq', zmq.__version__, 'numba',
numba.__version__, 'gymnasium', gymnasium.__version__, 'ale_py', ale_py.__version__)" || exit 1
git rev-parse HEAD 2>/dev/null
git status --porcelain 2>/dev/null | head -5

echo "== the CUDA path's tests"
"$PYTHON" -m pytest -q -W default -p no:randomly tests/test_cuda.py 2>&1 | tail -15

echo "== learner suite on $DEVICE"
"$PYTHON" -m launch bench learner --device "$DEVICE" --repeats "$LEARNER_REPEATS" $LEARNER_OPTIONS \
    --json "$OUT_DIR/learner.json" --markdown "$OUT_DIR/learner.md" || echo "learner suite failed: $?"

echo "== Pong, $PONG_SECONDS s, learner on $DEVICE"
rm -rf "$RUN_DIR"
nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used \
    --format=csv -l 5 > "$OUT_DIR/pong-gpu-utilization.csv" 2>/dev/null &
monitor=$!
timeout $((PONG_SECONDS + 120)) "$PYTHON" -m launch train --env Pong --device "$DEVICE" \
    --actors "$PONG_ACTORS" --shards "$PONG_SHARDS" --max-time "$PONG_SECONDS" --plain \
    --run-dir "$RUN_DIR" --set learner.metrics_interval_s=5 2>&1 | tail -40
echo "train exit: ${PIPESTATUS[0]}"
kill "$monitor" 2>/dev/null
"$PYTHON" -m launch status "$RUN_DIR" 2>&1 | tail -30
for name in metrics.jsonl summary.json config.json curves.png; do
    [ -f "$RUN_DIR/$name" ] && cp "$RUN_DIR/$name" "$OUT_DIR/pong-$name"
done
tail -n 60 "$RUN_DIR"/logs/learner*.log > "$OUT_DIR/pong-learner-log.txt" 2>/dev/null
ls -la "$OUT_DIR"
