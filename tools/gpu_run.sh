#!/usr/bin/env bash
# On the GPU machine (no network), from this checkout: install the wheels tools/gpu_wheels.sh downloaded (never torch:
# the machine's own CUDA torch stays), every part-N of FOLDER, then run `lineage gpu-check` from this checkout, its
# tests included; arguments after the first two go to the check (e.g. --budget_seconds 500).
#
#     bash tools/gpu_run.sh [FOLDER] [OUTPUT]   # defaults: gpu-wheels, $OUT/gpu-check (else outputs/gpu-check)
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=${1:-gpu-wheels}
out=${2:-${OUT:-outputs}/gpu-check}
if ls "$wheels"/part-*/torch-*.whl >/dev/null 2>&1; then
    echo "gpu_run: $wheels holds a torch wheel; remove it (the machine's own CUDA torch is used)" >&2
    exit 2
fi
PIP_BREAK_SYSTEM_PACKAGES=1 python -m pip install --no-deps --no-index --quiet "$wheels"/part-*/*.whl
python -m pip check || echo "gpu_run: pip check found the mismatches above; the check runs anyway" >&2
python -m train.gpu_check --output_dir "$out" "${@:3}"
