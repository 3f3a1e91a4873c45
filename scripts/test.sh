#!/usr/bin/env bash
# Everything a fresh clone needs to pass the tests: set up .venv, lint, format check, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
APEX_EXTRAS=${APEX_EXTRAS:-dev,bench,box2d,atari,mujoco} bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# As root (CI), the Slurm tests install and start a real Slurm in network namespaces and
# must run; elsewhere they skip.
if [ "$(id -u)" = 0 ]; then export APEX_REQUIRE_SLURM=${APEX_REQUIRE_SLURM:-1}; fi
exec .venv/bin/python -m pytest "$@"
