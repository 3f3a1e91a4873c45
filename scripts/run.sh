#!/usr/bin/env bash
# The main job on its embedded default: `apex train` with no arguments trains CartPole-v1
# on this machine (1 replay shard, 1 actor process of 8 envs, the learner) until the greedy
# evaluation mean reaches 475 over 20 episodes. The run directory goes under runs/; the last
# lines name it. Extra arguments are passed on (e.g. --max-time 120).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/apex train "$@"
