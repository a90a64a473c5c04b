#!/usr/bin/env bash
# The one prepared command for a lent GPU machine (issues 12 and 16; docs/gpu.md): the
# correctness checks first, then the memory benchmark, then the model-level one, each step
# time-boxed so the whole fits one device call (under 10 minutes) and a step that fails or
# runs out of time still leaves the others' results in OUT.
#
#   here, once:       benchmarks/external/fetch_titans_pytorch_wheels.sh .whl
#   on the device:    bash benchmarks/gpu_session.sh        (carry .whl; results in $OUT)
#   smoke test here:  DEVICE=cpu OUT=/tmp/gpu_out bash benchmarks/gpu_session.sh
#
# DEVICE=cpu runs the same steps at toy sizes in Triton's CPU interpreter: how the script is
# known to work without a GPU. STEP_SCALE (an integer) multiplies every step's time limit.
# The limits add up to 8.6 minutes, so one device call (at most 10) has room for the
# install and the machine's warm-up (about 30 s on 2026-12-04).
set -uo pipefail

out="${OUT:-gpu_out}"
device="${DEVICE:-cuda}"
scale="${STEP_SCALE:-1}"
mkdir -p "$out"
if compgen -G ".whl/*.whl" > /dev/null; then  # titans-pytorch and what it needs, offline
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="/tmp/site:src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python="$(command -v python3)"

step() {  # step NAME SECONDS COMMAND...: output in OUT/NAME.txt, status in OUT/steps.txt
  local name=$1 limit=$(($2 * scale)) start=$SECONDS
  shift 2
  echo "$name started limit=$limit" >> "$out/steps.txt"  # a step killed with the call shows
  timeout "$limit" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - start)) limit=$limit" | tee -a "$out/steps.txt"
  tail -n 4 "$out/$name.txt"
}

{
  command -v nvidia-smi > /dev/null && nvidia-smi
  "$python" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
} > "$out/env.txt" 2>&1
cat "$out/env.txt"

if [ "$device" = cuda ]; then
  # Each pytest step stops after a few failures and prints them at once (--maxfail, a short
  # traceback, pytest-timeout per test): a step killed by its limit prints no summary, which
  # is how the first GPU run (2026-12-04) learned only "44 failed".
  tests=(-p no:cacheprovider -q --tb=short --maxfail=3 --timeout=60)
  # the CUDA-only model tests: bf16 autocast of each model, the chunked form on the GPU
  step pytest_gpu 45 "$python" -m pytest "${tests[@]}" -m gpu tests/ops/test_cuda.py \
    tests/models/test_mixed_precision.py
  # the kernels' parity tests compiled for the GPU, the CUDA-only ones at real widths included
  step pytest_triton 110 "$python" -m pytest "${tests[@]}" -m "not slow" \
    tests/ops/test_triton.py tests/ops/test_triton_muon.py
  # the memory layer, ours (torch chunked form) vs titans-pytorch, bf16 and fp32
  step bench_layer 50 "$python" benchmarks/gpu.py --device cuda --cases layer titans-pytorch \
    --impls chunk --dtypes fp32 --warmup 1 --repeats 3 --out "$out/gpu_layer.json"
  # the op alone: torch form vs the fused kernels, and per-token Muon's NS5
  step bench_op 80 "$python" benchmarks/gpu.py --device cuda --cases op ns5 --dtypes bf16 \
    --impls chunk triton --warmup 1 --repeats 2 --out "$out/gpu_op.json"
  # MAC at the training shape (dim 512, depth 8, 4 x 2,048, bf16), titans-pytorch beside
  step bench_models 130 "$python" benchmarks/models.py --device cuda --dtype bf16 --models mac \
    --dim 512 --depth 8 --heads 8 --batch 4 --train-tokens 2048 --prompt-tokens 128 \
    --new-tokens 64 --repeats 2 --modes eager --titans-pytorch "$python" \
    --out "$out/models_bf16.json"
  # what `titans train` runs on long jobs (train.compile=auto) and `--compile auto` decoding:
  # compiled MAC at the CPU benchmark's size (dim 256, depth 2), not yet measured on a GPU
  step bench_compiled 100 "$python" benchmarks/models.py --device cuda --dtype bf16 \
    --models mac --modes compiled --repeats 3 --titans-pytorch none \
    --out "$out/models_compiled.json"
else
  export TRITON_INTERPRET=1
  step pytest_triton 300 "$python" -m pytest -q -x -m "not slow" -p no:cacheprovider \
    tests/ops/test_triton_muon.py -k "fused_ns5_equals or saving"
  step bench_memory 300 "$python" benchmarks/gpu.py --device cpu --tiny --out "$out/gpu.json"
  step bench_models 300 "$python" benchmarks/models.py --quick --dtype bf16 --models mac \
    --modes eager --titans-pytorch none --out "$out/models_bf16.json"
fi
