#!/usr/bin/env bash
# The GPU checks a session with a lent CUDA machine runs, in one go (bench/RESULTS.md, "On a
# GPU"): the CUDA path's tests, the learner suite on CUDA (updates/s and where each
# update's time goes; LEARNER_NETWORKS limits it to some networks' cases), then real
# `apex train` runs on Atari with the CUDA learner (threaded replay I/O, pinned memory,
# non-blocking copies), one after another, each run's curve, metrics and GPU load packed
# into OUT_DIR/runs.tar.gz. RUNS lists them as NAME:ALGORITHM:ENV:SECONDS[:SET,SET...]
# (--set options, comma-separated); the default: DQN on Pong with the update in a CUDA
# graph, DQN on Breakout, and R2D2 on Pong (its sequences on the frame store).
#
#   OUT_DIR=/tmp/gpu RUNS="pong:dqn:Pong:300 eager:dqn:Pong:60:dqn.cuda_graph=false" \
#       bash scripts/gpu_check.sh
#
# Run from the repository root with the project installed (an installed .venv; or, where
# only torch is, `pip install --no-deps --no-build-isolation --target DIR .` beside the
# dependencies' wheels and PYTHONPATH=DIR: apex's commands are entry points, which a bare
# PYTHONPATH holding the root does not provide). DEVICE=cpu runs the same steps on the
# CPU, to try the script where no GPU is. On a machine that got the tree without its .git,
# set APEX_GIT_COMMIT to the commit sent, so that the records name it (as stated; such a
# record is not one of a clean tree). At most 8 files come back from a lent machine: the
# outputs are learner.json, learner.md, runs.tar.gz and the log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT_DIR:-/tmp/gpu-check}
DEVICE=${DEVICE:-cuda}
RUNS=${RUNS:-pong:dqn:Pong:300 breakout:dqn:ALE/Breakout-v5:180 r2d2-pong:r2d2:Pong:120}
# Seconds after this script's start by which the last run must be over (a lent machine's
# call has a limit): the first run is shortened to fit, leaving each later run its
# seconds and RUN_OVERHEAD for every run's start and stop; a run left under 30 s is skipped.
UNTIL=${UNTIL:-0}  # 0: no limit
RUN_OVERHEAD=${RUN_OVERHEAD:-30}
ACTORS=${ACTORS:-10}
SHARDS=${SHARDS:-2}
LEARNER_REPEATS=${LEARNER_REPEATS:-3}
LEARNER_NETWORKS=${LEARNER_NETWORKS:-}  # e.g. "r2d2-mlp r2d2-nature-cnn"; empty: all
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
networks=()
for network in $LEARNER_NETWORKS; do networks+=(--network "$network"); done
"$PYTHON" -m launch bench learner --device "$DEVICE" --repeats "$LEARNER_REPEATS" $LEARNER_OPTIONS \
    "${networks[@]}" \
    --json "$OUT_DIR/learner.json" --markdown "$OUT_DIR/learner.md" || echo "learner suite failed: $?"

# One run: NAME, ALGORITHM, ENV, SECONDS, then --set options.
train_run() {
    local name=$1 algorithm=$2 env=$3 seconds=$4
    shift 4
    local run_dir="$RUN_ROOT/$name"
    echo "== $name: $algorithm on $env, $seconds s, learner on $DEVICE $(date -u +%T)"
    rm -rf "$run_dir"
    mkdir -p "$RUN_ROOT/out"
    nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used \
        --format=csv -l 5 > "$RUN_ROOT/out/$name-gpu.csv" 2>/dev/null &
    local monitor=$!
    timeout $((seconds + 120)) "$PYTHON" -m launch train --env "$env" --device "$DEVICE" \
        --actors "$ACTORS" --shards "$SHARDS" --max-time "$seconds" --plain \
        --run-dir "$run_dir" --set algorithm="$algorithm" --set learner.metrics_interval_s=5 \
        "$@" 2>&1 | tail -25
    echo "train exit: ${PIPESTATUS[0]} $(date -u +%T)"
    kill "$monitor" 2>/dev/null
    for file in metrics.jsonl summary.json config.json curves.png; do
        [ -f "$run_dir/$file" ] && cp "$run_dir/$file" "$RUN_ROOT/out/$name-$file"
    done
    grep -h "CUDA graph\|captured" "$run_dir"/logs/learner*.log 2>/dev/null | head -3
    tail -n 40 "$run_dir"/logs/learner*.log > "$RUN_ROOT/out/$name-learner-log.txt" 2>/dev/null
    "$PYTHON" -m launch status "$run_dir" 2>&1 | tail -12
    tar -czf "$OUT_DIR/runs.tar.gz" -C "$RUN_ROOT/out" .  # after each run: a cut call keeps it
}

read -ra runs <<< "$RUNS"
for index in "${!runs[@]}"; do
    IFS=: read -r name algorithm env seconds sets <<< "${runs[$index]}"
    if [ "$UNTIL" -gt 0 ]; then
        later=0
        for run in "${runs[@]:index+1}"; do
            IFS=: read -r _ _ _ later_seconds _ <<< "$run"
            later=$((later + later_seconds + RUN_OVERHEAD))
        done
        left=$((UNTIL - SECONDS - RUN_OVERHEAD - later))
        [ "$left" -lt "$seconds" ] && seconds=$left
    fi
    if [ "$seconds" -lt 30 ]; then
        echo "== $name skipped: $seconds s left for it"
        continue
    fi
    options=()
    IFS=, read -ra set_list <<< "$sets"
    for item in "${set_list[@]}"; do options+=(--set "$item"); done
    train_run "$name" "$algorithm" "$env" "$seconds" "${options[@]}"
done
ls -la "$OUT_DIR"
