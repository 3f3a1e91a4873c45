#!/usr/bin/env bash
# Everything a fresh clone needs to pass the tests: set up .venv, lint, format check, tests.
#
#   bash scripts/test.sh            the whole suite (what CI runs)
#   bash scripts/test.sh --fast     the inner loop, under a minute: every test but those
#                                   marked slow (2 s or more each: training runs, benchmark
#                                   commands, Slurm jobs, a terminal, shard processes under
#                                   load, emulators, property searches); other arguments go
#                                   to pytest, e.g. --fast tests/test_wire.py
#
# Tests run in APEX_TEST_WORKERS (2) pytest-xdist workers, a test file to a worker, in
# xdist's order (files of more tests first). Handing out the longest files first was
# measured slower (bench/HISTORY.md has the runs): their training runs then share the
# cores and slow each other, and a run that ends at its solve trains longer.
# Most of the suite waits on child processes, sockets and Slurm; three workers finish a
# minute sooner on a 2-core machine, but three of four full runs there each failed a
# different test that times real training under load, so two it is. A fixture made once
# (the Slurm cluster, a training run, a fleet) serves only the tests of its own file, so
# no two workers make it.
# APEX_TEST_WORKERS=0 runs them in this process, e.g. for pdb.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
if [ "${1:-}" = "--fast" ]; then
  shift
  tier=(-m "not slow")
fi
APEX_EXTRAS=${APEX_EXTRAS:-dev,bench,box2d,atari,mujoco,minatar,popgym} bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# As root (CI), the Slurm tests install and start a real Slurm in network namespaces and
# must run; elsewhere they skip.
if [ "$(id -u)" = 0 ]; then export APEX_REQUIRE_SLURM=${APEX_REQUIRE_SLURM:-1}; fi
workers=${APEX_TEST_WORKERS:-2}
parallel=()
if [ "$workers" != 0 ]; then parallel=(-n "$workers" --dist loadfile); fi
exec .venv/bin/python -m pytest "${parallel[@]}" "${tier[@]}" "$@"
