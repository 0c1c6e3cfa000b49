#!/usr/bin/env bash
# Download, on a machine with network, every wheel the GPU machine needs besides its own CUDA torch, for CPython 3.12
# on manylinux x86_64, into a git-ignored folder; tools/gpu_run.sh installs them there offline and runs the check.
#
#     bash tools/gpu_wheels.sh [FOLDER]        # default: gpu-wheels (git-ignored); prints the folder's size
#
# The wheels end in FOLDER/part-1, part-2, ... of at most 60 MiB each (pyarrow alone is about 53 MiB): the device
# machine carries 64 MiB a call, so each part travels in a call of its own and stays there for the next.
#
# Lineage itself and deepspeed (an sdist only) are built here (`pip wheel --no-deps`; deepspeed's ops compile at run
# time). flash-attn has no wheel on PyPI: it is skipped (its tests skip). docs/performance.md ("GPU figures").
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-gpu-wheels}
mkdir -p "$dest"
target=(--python-version 3.12 --implementation cp --abi cp312 --platform manylinux2014_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --only-binary=:all:)
extra=(peft deepspeed liger-kernel pytest pytest-timeout hypothesis)  # the GPU tests' and the check's

python -m pip wheel --no-deps --quiet -w "$dest" .
DS_BUILD_OPS=0 python -m pip wheel --no-deps --no-build-isolation --quiet -w "$dest" deepspeed \
    || echo "gpu_wheels: deepspeed did not build here; its GPU tests will fail to import it" >&2
lineage=$(ls "$dest"/lineage-*.whl | head -n 1)
python -m pip install --dry-run --ignore-installed --quiet --report "$dest/resolved.json" --target "$dest/.unused" \
    --find-links "$dest" "${target[@]}" "$lineage" "${extra[@]}"
python tools/wheel_list.py "$dest/resolved.json" > "$dest/requirements.txt"
python -m pip download --no-deps --quiet -d "$dest" "${target[@]}" -r "$dest/requirements.txt"
rm -rf "$dest/.unused"
echo "gpu_wheels: $(ls "$dest"/*.whl | wc -l) wheels, $(du -sh --apparent-size "$dest" | cut -f1) in $dest; largest:"
ls -S -s --block-size=M "$dest"/*.whl | head -n 8
python tools/wheel_list.py --split 60 "$dest"
