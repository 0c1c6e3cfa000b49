"""What tools/gpu_wheels.sh downloads for the GPU machine: of what a `pip install --dry-run --report` resolved, what
the machine's image (tools/gpu_image.txt) lacks or holds at another version, one `name==version` a line.

    python tools/wheel_list.py ceilings tools/gpu_image.txt pyproject.toml peft ...  # the resolution's constraints
    python tools/wheel_list.py carry tools/gpu_image.txt resolved.json ...           # for `pip download --no-deps`

An image package travels when a resolved package rejects its version, or caps it (`<`, `<=`, `==`, `~=`) where its
version is unknown; pip on the machine keeps the installed one wherever it fits. docs/performance.md ("GPU figures").
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

TORCH_OWN = ("torch", "triton")  # the machine's CUDA torch: never carried, whatever gpu_image.txt says
TORCH_CUDA = ("nvidia-", "cuda-")  # the CUDA libraries of torch's build: the machine's own, named by its CUDA version
BUILT_HERE = ("lineage", "deepspeed")  # wheels gpu_wheels.sh builds (`pip wheel`), not downloads
CAPS = ("<", "<=", "==", "===", "~=")
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "extra": ""}  # the machine's python3


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_image(path: Path) -> dict[str, str | None]:
    """name -> version (None where unknown) of each `name` or `name==version` line; `#` starts a comment."""
    image = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name.strip()) or (_ and not version.strip()):
            raise ValueError(f"{path}:{number}: expected `name` or `name==version`, got {line!r}")
        image[canonical(name)] = version.strip() or None
    return image


def project_requirements(pyproject: Path, extra: list[str]) -> list[Requirement]:
    """The project's dependencies, then the `extra` requirements (what the GPU machine installs besides)."""
    return [Requirement(r) for r in [*tomllib.loads(pyproject.read_text())["project"]["dependencies"], *extra]]


def ceilings(image: dict[str, str | None], requirements: list[Requirement]) -> list[str]:
    """`name<=version` of each image package of known version that every requirement naming it accepts: the
    resolution here picks nothing that needs more than the machine holds (nor a version this registry lacks)."""
    def accepted(name: str, version: str) -> bool:
        return all(r.specifier.contains(version, prereleases=True) for r in requirements if canonical(r.name) == name)

    return [f"{name}<={version}" for name, version in sorted(image.items()) if version and accepted(name, version)]


def specifiers(report: dict) -> dict[str, list[SpecifierSet]]:
    """name -> what the resolved packages require of it (markers read for the machine's python)."""
    environment = {**report.get("environment", {}), **TARGET}
    found: dict[str, list[SpecifierSet]] = {}
    for item in report["install"]:
        for requirement in map(Requirement, item["metadata"].get("requires_dist", [])):
            if requirement.marker is None or requirement.marker.evaluate(environment):
                found.setdefault(canonical(requirement.name), []).append(requirement.specifier)
    return found


def lacks(image: dict[str, str | None], name: str, required: list[SpecifierSet]) -> bool:
    """Whether the machine lacks what `required` asks of `name`: not in the image, in it at a version one of them
    rejects, or in it at an unknown version one of them caps."""
    if name not in image:
        return True
    if image[name] is None:
        return any(spec.operator in CAPS for specifier in required for spec in specifier)
    return not all(specifier.contains(image[name], prereleases=True) for specifier in required)


def carry(image: dict[str, str | None], reports: list[dict]) -> list[str]:
    """`name==version` of each package the reports install that the machine lacks (`lacks`); never torch, its CUDA
    libraries nor what is built here. Sorted, each version once."""
    found = set()
    for report in reports:
        required = specifiers(report)
        for item in report["install"]:
            name, version = canonical(item["metadata"]["name"]), item["metadata"]["version"]
            own = name.startswith(TORCH_CUDA) or name in TORCH_OWN + BUILT_HERE
            if not own and lacks(image, name, required.get(name, [])):
                found.add((name, version))
    return [f"{name}=={version}" for name, version in sorted(found)]


if __name__ == "__main__":
    command, image_file, *rest = sys.argv[1:]
    image = read_image(Path(image_file))
    if command == "ceilings":
        print("\n".join(ceilings(image, project_requirements(Path(rest[0]), rest[1:]))))
    elif command == "carry":
        print("\n".join(carry(image, [json.loads(Path(path).read_text()) for path in rest])))
    else:
        sys.exit(f"wheel_list.py: unknown command {command!r}; commands: ceilings, carry")
