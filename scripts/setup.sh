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
# The project's own modules to bytecode, each time (compileall skips those up to date):
# where PYTHONDONTWRITEBYTECODE is set, every role process would compile them again,
# 0.15 s of each one's start.
.venv/bin/python -m compileall -q -j0 apex replay launch bench tests examples >/dev/null || true
# The install is editable: only pyproject.toml (dependencies, entry points) or the extras
# asked for make it stale. The stamp keeps a warm .venv from paying an install each time.
stamp=.venv/.apex-installed
want="$(sha256sum pyproject.toml | cut -d' ' -f1) ${EXTRAS} ${TORCH}"
found="import importlib.util as u, sys; sys.exit(not all(map(u.find_spec, ('apex', 'torch'))))"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && .venv/bin/python -c "$found"; then
  exit 0
fi
# uv installs the same packages as pip, resolving and unpacking in parallel: a fresh .venv
# takes about 20 s instead of pip's 50. It reads the find-links pip is given here (the
# local torch wheel; uv wants them comma-separated). Like pip it compiles the bytecode at
# install: where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) nothing
# else would, and every process would compile torch again (2.8 s instead of 1.4 s an
# import). Where uv cannot be had, or fails, pip does the same install.
if [ -n "${PIP_FIND_LINKS:-}" ] && [ -z "${UV_FIND_LINKS:-}" ]; then
  export UV_FIND_LINKS=${PIP_FIND_LINKS// /,}
fi
install() {
  if { [ -x .venv/bin/uv ] || .venv/bin/python -m pip install -qq uv 2>/dev/null; } &&
      .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python "$@"; then
    return
  fi
  .venv/bin/python -m pip install -qq --disable-pip-version-check "$@"
}
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  install "$TORCH"
fi
# -q: installer notices (an editable-install banner) are noise on every run; errors
# still print.
install -e ".[${EXTRAS}]"
echo "$want" > "$stamp"
