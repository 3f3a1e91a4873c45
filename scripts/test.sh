#!/usr/bin/env bash
# Everything a fresh clone needs to pass the tests: set up .venv, lint, format check, tests.
#
#   bash scripts/test.sh            the whole suite (what CI runs)
#   bash scripts/test.sh --fast     the inner loop: every test but those marked slow (real
#                                   training runs, benchmark commands, Slurm jobs, a terminal,
#                                   several shard processes at once); other arguments go to
#                                   pytest, e.g. --fast tests/test_wire.py
#
# Tests run in APEX_TEST_WORKERS (3) pytest-xdist workers, a test file to a worker: most of
# the suite waits on child processes, sockets and Slurm, so even two workers left a 2-core
# machine's cores 40% idle; with three, the Slurm file (4.5 minutes) has one to itself and
# the rest share two. The longest files go first (tests/conftest.py). A fixture made once
# (the Slurm cluster, a training run, a fleet) serves only the tests of its own file, so no
# two workers make it.
# APEX_TEST_WORKERS=0 runs them in this process, e.g. for pdb.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
if [ "${1:-}" = "--fast" ]; then
  shift
  tier=(-m "not slow")
fi
APEX_EXTRAS=${APEX_EXTRAS:-dev,bench,box2d,atari,mujoco,minatar} bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# As root (CI), the Slurm tests install and start a real Slurm in network namespaces and
# must run; elsewhere they skip.
if [ "$(id -u)" = 0 ]; then export APEX_REQUIRE_SLURM=${APEX_REQUIRE_SLURM:-1}; fi
workers=${APEX_TEST_WORKERS:-3}
parallel=()
if [ "$workers" != 0 ]; then parallel=(-n "$workers" --dist loadfile); fi
exec .venv/bin/python -m pytest "${parallel[@]}" "${tier[@]}" "$@"
