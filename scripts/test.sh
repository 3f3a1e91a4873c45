#!/usr/bin/env bash
# Everything a fresh clone needs to pass the tests: set up .venv, lint, format check, tests.
#
#   bash scripts/test.sh            the whole suite (what CI runs)
#   bash scripts/test.sh --fast     the inner loop: every test but those marked slow (real
#                                   training runs, benchmark commands, Slurm jobs, a terminal,
#                                   several shard processes at once); other arguments go to
#                                   pytest, e.g. --fast tests/test_wire.py
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
if [ "${1:-}" = "--fast" ]; then
  shift
  tier=(-m "not slow")
fi
APEX_EXTRAS=${APEX_EXTRAS:-dev,bench,box2d,atari,mujoco} bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# As root (CI), the Slurm tests install and start a real Slurm in network namespaces and
# must run; elsewhere they skip.
if [ "$(id -u)" = 0 ]; then export APEX_REQUIRE_SLURM=${APEX_REQUIRE_SLURM:-1}; fi
exec .venv/bin/python -m pytest "${tier[@]}" "$@"
