#!/usr/bin/env bash
# On the GPU machine (no network), from this checkout: install offline what tools/gpu_wheels.sh put in FOLDER (pip
# resolves its top-level requirements against what is installed and picks among the candidates; a constraint pins the
# machine's own CUDA torch, so it is never replaced), `pip check`, then `lineage gpu-check` from this checkout, its
# tests included, with what is left of 570 s as its --budget_seconds (GPU_RUN_SECONDS), so that the whole command ends
# inside one device call's 600 s; arguments after the first two go to the check (e.g. --parts benchmark). The check's
# folder (runs, caches, logs: large) stays on the machine; report.md, report.json and an archive of every step's log
# and metrics go to $OUT, which the device tool brings back (8 files at most, 2 folders down).
#
#     bash tools/gpu_run.sh [FOLDER] [OUTPUT]   # defaults: gpu-wheels, outputs/gpu-check
#
# One device call carries FOLDER (it is git-ignored) and runs this; docs/performance.md ("GPU figures").
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=${1:-gpu-wheels}
out=${2:-outputs/gpu-check}
python=${PYTHON:-python3}
if ls "$wheels"/torch-*.whl >/dev/null 2>&1; then
    echo "gpu_run: $wheels holds a torch wheel; remove it (the machine's own CUDA torch is used)" >&2
    exit 2
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$python" -c 'from importlib.metadata import version; print("torch==" + version("torch"))' > "$constraints"
PIP_BREAK_SYSTEM_PACKAGES=1 "$python" -m pip install --no-index --find-links "$wheels" --no-compile --quiet \
    -c "$constraints" -r "$wheels/top-level.txt" \
    || echo "gpu_run: the offline install failed (above); the check runs with what is installed" >&2
"$python" -m pip check || echo "gpu_run: pip check found the mismatches above; the check runs anyway" >&2
budget=$(( ${GPU_RUN_SECONDS:-570} - SECONDS ))
echo "gpu_run: installed in $SECONDS s; the check gets $budget s"
status=0
"$python" -m train.gpu_check --output_dir "$out" --overwrite_output_dir true --budget_seconds "$budget" "${@:3}" \
    || status=$?
if [ -n "${OUT:-}" ] && [ -d "$out" ]; then
    cp "$out"/report.md "$out"/report.json "$OUT"/ || true
    (cd "$out" && find . \( -name '*.log' -o -name metrics.jsonl -o -name results.json \) -print0 \
        | tar czf "$OUT/gpu-check-logs.tar.gz" --null -T -) || true
fi
exit "$status"
