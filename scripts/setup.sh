#!/usr/bin/env bash
# Creates .venv (if missing) and installs this project into it, editable, with the extras
# named in $APEX_EXTRAS (default "dev"). Idempotent: re-running only installs what changed.
#
# torch: we pre-install $APEX_TORCH (default torch==2.13.0). On this project's CPU machines
# that pin resolves to a CPU wheel kept on local disk, so set-up and CI never download a
# multi-GB CUDA build. On a GPU machine set APEX_TORCH=torch (or install torch yourself
# first) to get the CUDA build; the package itself only asks for torch>=2.3.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
EXTRAS=${APEX_EXTRAS:-dev}
TORCH=${APEX_TORCH:-torch==2.13.0}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# The install is editable: only pyproject.toml (dependencies, entry points) or the extras
# asked for make it stale. The stamp keeps a warm .venv from paying pip's 9 s each time.
stamp=.venv/.apex-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1) ${EXTRAS} ${TORCH}"
found="import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ('apex', 'torch'))))"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && .venv/bin/python -c "$found"; then
  exit 0
fi
.venv/bin/python -m pip install -qq --disable-pip-version-check --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "$TORCH"
fi
# -qq: pip and setuptools notices (an editable-install banner) are noise on every run;
# errors still print.
.venv/bin/python -m pip install -qq --disable-pip-version-check -e ".[${EXTRAS}]"
echo "$want" > "$stamp"
