#!/usr/bin/env bash
# Everything a fresh clone needs to pass the tests: set up .venv, lint, format check, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
APEX_EXTRAS=${APEX_EXTRAS:-dev,bench,box2d,atari} bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
exec .venv/bin/python -m pytest "$@"
