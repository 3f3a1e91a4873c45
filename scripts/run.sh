#!/usr/bin/env bash
# The main job on its embedded default. Until the training loop lands this is the replay
# benchmark (this project beside cpprb and torchrl), written to bench-results/.
set -euo pipefail
cd "$(dirname "$0")/.."
APEX_EXTRAS=${APEX_EXTRAS:-dev,bench} bash scripts/setup.sh
exec .venv/bin/apex bench replay --json bench-results/replay.json \
  --markdown bench-results/replay.md "$@"
