#!/usr/bin/env bash
# Create (or update) the venv used by titans_pytorch_memory.py; safe to re-run.
# Usage: benchmarks/external/setup_titans_pytorch.sh [VENV_DIR]
#   VENV_DIR defaults to <repo root>/../venvs/titans-pytorch (outside the repo).
# torch is pinned to 2.13.0 through a constraints file so that titans-pytorch's
# dependencies cannot pull another (e.g. CUDA) torch build; where pip is set up with a
# local CPU wheel (find-links), that wheel is used.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${1:-$repo_root/../venvs/titans-pytorch}"
python="${PYTHON:-python3}"

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"

constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" > "$constraints"

"$venv/bin/python" -m pip install -q -c "$constraints" torch==2.13.0 titans-pytorch==0.5.5 numpy
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
import torch
assert torch.__version__.startswith("2.13.0"), torch.__version__
print("torch", torch.__version__, "titans-pytorch", version("titans-pytorch"))
PY
