"""The packages a `pip install --dry-run --report` resolved, less what the GPU machine's own torch brings and what
tools/gpu_wheels.sh builds itself: one `name==version` a line, for `pip download --no-deps`.

    python tools/wheel_list.py resolved.json > requirements.txt
    python tools/wheel_list.py --split 60 gpu-wheels     # the wheels moved into part-1, part-2, ... of <= 60 MiB

The device machine carries at most 64 MiB a call: `--split` groups the wheels (largest first, each into the first
part with room) so that each part travels in its own call and stays there for the next.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# installed with the GPU machine's CUDA torch: never downloaded, never replaced
TORCH_OWN = ("torch", "triton", "nvidia-*", "cuda-*", "sympy", "mpmath", "networkx", "jinja2", "markupsafe",
             "filelock", "typing-extensions", "setuptools")
BUILT_HERE = ("lineage", "deepspeed")  # wheels gpu_wheels.sh builds (`pip wheel`), not downloads


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _matches(name: str, pattern: str) -> bool:
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def requirements(report: dict) -> list[str]:
    """`name==version` of each package the report installs, but those of TORCH_OWN and BUILT_HERE, sorted."""
    found = {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in report["install"]}
    return [f"{name}=={version}" for name, version in sorted(found.items())
            if not any(_matches(name, pattern) for pattern in TORCH_OWN + BUILT_HERE)]


def split(sizes: dict[str, int], limit: int) -> list[list[str]]:
    """The names of `sizes` (name -> bytes) in parts of at most `limit` bytes (a larger one alone), largest first."""
    parts: list[list[str]] = []
    room: list[int] = []
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        fit = next((i for i, left in enumerate(room) if sizes[name] <= left), None)
        if fit is None:
            parts.append([])
            room.append(limit)
            fit = len(parts) - 1
        parts[fit].append(name)
        room[fit] -= sizes[name]
    return parts


def move_into_parts(folder: Path, limit_mib: float) -> list[Path]:
    wheels = {p.name: p.stat().st_size for p in folder.glob("*.whl")}
    targets = []
    for i, names in enumerate(split(wheels, int(limit_mib * 2**20)), start=1):
        targets.append(folder / f"part-{i}")
        targets[-1].mkdir(exist_ok=True)
        for name in names:
            (folder / name).replace(targets[-1] / name)
    return targets


if __name__ == "__main__":
    if sys.argv[1] == "--split":
        for part in move_into_parts(Path(sys.argv[3]), float(sys.argv[2])):
            print(part, f"{sum(p.stat().st_size for p in part.iterdir()) / 2**20:.1f} MiB")
    else:
        print("\n".join(requirements(json.loads(Path(sys.argv[1]).read_text()))))
