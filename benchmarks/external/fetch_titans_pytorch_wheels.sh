#!/usr/bin/env bash
# Download titans-pytorch 0.5.5 and the pure-Python packages it needs that the GPU machine's
# image lacks, as wheels for Python 3.12, into DIR (default .whl, ignored by git), so that a
# GPU run can install them offline beside its own torch (docs/gpu.md):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
# Usage: benchmarks/external/fetch_titans_pytorch_wheels.sh [DIR]
set -euo pipefail

dir="${1:-.whl}"
python="${PYTHON:-python3}"
# The closure of titans-pytorch==0.5.5's requirements (pip's resolver, 2026-11) minus what the
# GPU image already holds (torch, einops, numpy, ninja, tqdm, packaging, cloudpickle).
wheels=(
  titans-pytorch==0.5.5 assoc-scan==0.0.6 axial-positional-embedding==0.3.12 einx==0.4.3
  hyper-connections==0.4.11 rotary-embedding-torch==0.9.1 tensordict==0.15.3
  x-transformers==2.31.10 accelerated-scan==0.3.1 pyvers==0.2.3 torch-einops-utils==0.2.0
  frozendict==2.5.1 loguru==0.7.3
)
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$dir" "${wheels[@]}"
ls -l "$dir"
