#!/usr/bin/env bash
# Download, on a machine with network, what the GPU machine lacks (its image's packages: tools/gpu_image.txt), for
# CPython 3.12 on manylinux x86_64, into ONE git-ignored folder that travels in one device call (at most 55 MiB of
# the 64 MiB carried); tools/gpu_run.sh installs from it there offline and runs the check.
#
#     bash tools/gpu_wheels.sh [FOLDER]        # default: gpu-wheels (git-ignored); lists the folder and its size
#
# The resolution here is capped at the image's known versions that pyproject.toml accepts (wheel_list.py ceilings),
# once per line of `candidates`, and the folder holds the union (wheel_list.py carry): the image's pyarrow version is
# unknown and its wheel too large to carry, datasets 5.2 needs pyarrow >= 24 and 4.x >= 21, so both travel with their
# dill / multiprocess / fsspec, and pip on the machine picks what fits what is installed. Lineage itself and
# deepspeed (an sdist only) are built here (`pip wheel --no-deps`; deepspeed's ops compile at run time). flash-attn
# has no wheel on PyPI: it is skipped (its tests skip). docs/performance.md ("GPU figures").
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-gpu-wheels}
limit_mib=55
target=(--python-version 3.12 --implementation cp --abi cp312 --platform manylinux2014_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --only-binary=:all:)
top=(peft deepspeed pytest pytest-timeout hypothesis)  # besides lineage: the GPU tests' and the check's
candidates=("" "datasets<5")  # a constraint each: the newest datasets, then the newest 4.x

if [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
    if [ ! -f "$dest/top-level.txt" ]; then
        echo "gpu_wheels: $dest holds files this script did not write; name a new or empty folder" >&2
        exit 2
    fi
    rm -rf "$dest"  # this script's own earlier folder
fi
mkdir -p "$dest"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python -m pip wheel --no-deps --quiet -w "$dest" .
DS_BUILD_OPS=0 python -m pip wheel --no-deps --no-build-isolation --quiet -w "$dest" deepspeed \
    || echo "gpu_wheels: deepspeed did not build here; its GPU tests will fail to import it" >&2
lineage=$(ls "$dest"/lineage-*.whl | head -n 1)
printf '%s\n' lineage "${top[@]}" > "$dest/top-level.txt"
python tools/wheel_list.py ceilings tools/gpu_image.txt pyproject.toml "${top[@]}" > "$work/ceilings.txt"
# the machine's torch stands in as an empty wheel of its version: its CUDA libraries are never resolved here
python tools/wheel_list.py stub tools/gpu_image.txt "$work/stub" >> "$work/ceilings.txt"
reports=()
for i in "${!candidates[@]}"; do
    { cat "$work/ceilings.txt"; echo "${candidates[$i]}"; } > "$work/constraints-$i.txt"
    python -m pip install --dry-run --ignore-installed --quiet --report "$work/resolved-$i.json" \
        --target "$work/unused" --find-links "$dest" --find-links "$work/stub" "${target[@]}" \
        -c "$work/constraints-$i.txt" "$lineage" "${top[@]}"
    reports+=("$work/resolved-$i.json")
done
# one `pip download` per round, each name at most once in a round (pip refuses two versions of one name at once)
python tools/wheel_list.py carry tools/gpu_image.txt "${reports[@]}" \
    | awk -F'==' -v dir="$work" '{ print > (dir "/round-" ++seen[$1] ".txt") }'
for round in "$work"/round-*.txt; do
    python -m pip download --no-deps --quiet -d "$dest" "${target[@]}" -r "$round"
done
size=$(du -sm --apparent-size "$dest" | cut -f1)
echo "gpu_wheels: $(ls "$dest"/*.whl | wc -l) wheels, $size MiB in $dest (carry it: it is git-ignored):"
ls -s --block-size=K -S "$dest"/*.whl
if [ "$size" -gt "$limit_mib" ]; then
    echo "gpu_wheels: $dest is over $limit_mib MiB: it no longer travels in one device call with the checkout" >&2
    exit 1
fi
