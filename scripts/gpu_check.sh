#!/usr/bin/env bash
# The GPU checks a session with a lent CUDA machine runs, in one go (bench/RESULTS.md, "On a
# GPU"): the CUDA path's tests, the learner suite on CUDA (updates/s and where each
# update's time goes), then real `apex train` runs on Pong with the CUDA learner (threaded
# replay I/O, pinned memory, non-blocking copies): a short one with every update eager
# (learner.cuda_graph=false, the baseline of the same call), then one of PONG_SECONDS with
# the update in a CUDA graph, its curve and metrics packed into OUT_DIR/pong.tar.gz; then
# R2D2 on Pong for R2D2_SECONDS (its sequences on the frame store, packed beside them).
#
#   OUT_DIR=/tmp/gpu PONG_SECONDS=300 PONG_BASELINE_SECONDS=60 bash scripts/gpu_check.sh
#
# Run from the repository root with the project importable (an installed .venv, or
# PYTHONPATH holding the root and its dependencies). DEVICE=cpu runs the same steps on the
# CPU, to try the script where no GPU is. On a machine that got the tree without its .git,
# set APEX_GIT_COMMIT to the commit sent, so that the records name it (as stated; such a
# record is not one of a clean tree). At most 8 files come back from a lent machine: the
# outputs are learner.json, learner.md, pong.tar.gz and the log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT_DIR:-/tmp/gpu-check}
DEVICE=${DEVICE:-cuda}
PONG_SECONDS=${PONG_SECONDS:-300}
PONG_BASELINE_SECONDS=${PONG_BASELINE_SECONDS:-60}  # 0: no eager baseline run
# Seconds after this script's start by which the last run must be over (a lent machine's
# call has a limit): the graph run is shortened to fit, with 45 s for its start and stop
# and R2D2_SECONDS more for the R2D2 run after it.
PONG_UNTIL=${PONG_UNTIL:-0}  # 0: no limit
R2D2_SECONDS=${R2D2_SECONDS:-120}  # 0: no R2D2 run
PONG_ACTORS=${PONG_ACTORS:-10}
PONG_SHARDS=${PONG_SHARDS:-2}
LEARNER_REPEATS=${LEARNER_REPEATS:-3}
LEARNER_OPTIONS=${LEARNER_OPTIONS:-}  # e.g. --quick, to try the script on a CPU
PYTHON=${PYTHON:-python3}
RUN_ROOT=${RUN_ROOT:-/tmp/gpu-check-runs}
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

echo "== the CUDA path's tests $(date -u +%T)"
"$PYTHON" -m pytest -q -W default -p no:randomly -p no:cacheprovider tests/test_cuda.py 2>&1 | tail -25

echo "== learner suite on $DEVICE $(date -u +%T)"
"$PYTHON" -m launch bench learner --device "$DEVICE" --repeats "$LEARNER_REPEATS" $LEARNER_OPTIONS \
    --json "$OUT_DIR/learner.json" --markdown "$OUT_DIR/learner.md" || echo "learner suite failed: $?"

# One Pong run: NAME, SECONDS, then --set options.
pong() {
    local name=$1 seconds=$2
    shift 2
    local run_dir="$RUN_ROOT/$name"
    echo "== Pong $name, $seconds s, learner on $DEVICE $(date -u +%T)"
    rm -rf "$run_dir"
    mkdir -p "$RUN_ROOT/out"
    nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used \
        --format=csv -l 5 > "$RUN_ROOT/out/$name-gpu.csv" 2>/dev/null &
    local monitor=$!
    timeout $((seconds + 120)) "$PYTHON" -m launch train --env Pong --device "$DEVICE" \
        --actors "$PONG_ACTORS" --shards "$PONG_SHARDS" --max-time "$seconds" --plain \
        --run-dir "$run_dir" --set learner.metrics_interval_s=5 "$@" 2>&1 | tail -25
    echo "train exit: ${PIPESTATUS[0]} $(date -u +%T)"
    kill "$monitor" 2>/dev/null
    for file in metrics.jsonl summary.json config.json curves.png; do
        [ -f "$run_dir/$file" ] && cp "$run_dir/$file" "$RUN_ROOT/out/$name-$file"
    done
    grep -h "CUDA graph\|captured" "$run_dir"/logs/learner*.log 2>/dev/null | head -3
    tail -n 40 "$run_dir"/logs/learner*.log > "$RUN_ROOT/out/$name-learner-log.txt" 2>/dev/null
    tar -czf "$OUT_DIR/pong.tar.gz" -C "$RUN_ROOT/out" .  # after each run: a cut call keeps it
}

if [ "$PONG_BASELINE_SECONDS" -gt 0 ]; then
    pong eager "$PONG_BASELINE_SECONDS" --set learner.cuda_graph=false
fi
seconds=$PONG_SECONDS
r2d2_share=$(( R2D2_SECONDS > 0 ? R2D2_SECONDS + 45 : 0 ))
if [ "$PONG_UNTIL" -gt 0 ] && [ $((PONG_UNTIL - SECONDS - 45 - r2d2_share)) -lt "$seconds" ]; then
    seconds=$((PONG_UNTIL - SECONDS - 45 - r2d2_share))
fi
[ "$seconds" -ge 30 ] && pong graph "$seconds"
if [ "$R2D2_SECONDS" -gt 0 ]; then
    pong r2d2 "$R2D2_SECONDS" --set algorithm=r2d2
fi
"$PYTHON" -m launch status "$RUN_ROOT/graph" 2>&1 | tail -30
ls -la "$OUT_DIR"
