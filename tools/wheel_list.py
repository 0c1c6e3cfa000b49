"""What tools/gpu_wheels.sh downloads for the GPU machine: of what a `pip install --dry-run --report` resolved, what
the machine's image (tools/gpu_image.txt) lacks or holds at another version, one `name==version` a line.

    python tools/wheel_list.py ceilings tools/gpu_image.txt pyproject.toml peft ...  # the resolution's constraints
    python tools/wheel_list.py carry tools/gpu_image.txt resolved.json ...           # for `pip download --no-deps`
    python tools/wheel_list.py stub tools/gpu_image.txt FOLDER                       # stand-ins for the machine's torch

An image package travels when a resolved package rejects its version, or, where its version is unknown, asks
anything of it (a cap, or a floor such as transformers' `regex>=2025.10.22`), but for the large packages of
`TRUSTED_FLOORS`, which travel only when capped; pip on the machine keeps the installed one wherever it fits.
docs/performance.md ("GPU figures").
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

TORCH_OWN = ("torch", "triton")  # the machine's CUDA torch: never carried, whatever gpu_image.txt says
TORCH_CUDA = ("nvidia-", "cuda-")  # the CUDA libraries of torch's build: the machine's own, named by its CUDA version
BUILT_HERE = ("lineage", "deepspeed")  # wheels gpu_wheels.sh builds (`pip wheel`), not downloads
CAPS = ("<", "<=", "==", "===", "~=")
# over 5 MB each, and an image of 2026-11 holds a release above every floor the project's packages set (pyarrow's,
# datasets 5.2's >=24, is why gpu_wheels.sh also resolves the newest datasets 4.x, which asks >=21): only a cap on
# one of these makes it travel where the image's version is unknown
TRUSTED_FLOORS = ("pyarrow", "pandas", "matplotlib", "tensorboard", "scipy", "grpcio", "pillow", "scikit-learn")
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


def requirements_of(report: dict) -> dict[str, list[Requirement]]:
    """name -> the requirements of that resolved package (markers read for the machine's python)."""
    environment = {**report.get("environment", {}), **TARGET}
    return {canonical(item["metadata"]["name"]): [r for r in map(Requirement, item["metadata"].get("requires_dist", []))
                                                  if r.marker is None or r.marker.evaluate(environment)]
            for item in report["install"]}


def lacks(image: dict[str, str | None], name: str, required: list[SpecifierSet]) -> bool:
    """Whether the machine lacks what `required` asks of `name`: not in the image, in it at a version one of them
    rejects, or in it at an unknown version one of them constrains (caps only, for `TRUSTED_FLOORS`)."""
    if name not in image:
        return True
    if image[name] is None:
        asked = [spec for specifier in required for spec in specifier]
        return any(spec.operator in CAPS for spec in asked) if name in TRUSTED_FLOORS else bool(asked)
    return not all(specifier.contains(image[name], prereleases=True) for specifier in required)


def travelling(image: dict[str, str | None], report: dict) -> set[str]:
    """The packages of one resolution that go to the machine: what was asked for (`requested`) and the image lacks,
    what is built here, then, until nothing changes, what those ask for that the image lacks (`lacks`). The
    requirements of a package that stays (torch, or anything the image holds) are its own installation's business."""
    requires, versions = requirements_of(report), {canonical(i["metadata"]["name"]) for i in report["install"]}
    movable = {name for name in versions if not name.startswith(TORCH_CUDA) and name not in TORCH_OWN}
    going = {canonical(i["metadata"]["name"]) for i in report["install"] if i.get("requested")} & movable
    going = {name for name in going if name in BUILT_HERE or lacks(image, name, [])}
    while True:
        asked: dict[str, list[SpecifierSet]] = {}
        for parent in going:
            for requirement in requires.get(parent, []):
                asked.setdefault(canonical(requirement.name), []).append(requirement.specifier)
        more = {name for name, wanted in asked.items()
                if name in movable and name not in going and lacks(image, name, wanted)}
        if not more:
            return going
        going |= more


def carry(image: dict[str, str | None], reports: list[dict]) -> list[str]:
    """`name==version` of each package of the reports that travels (`travelling`), but what is built here: sorted,
    each version once."""
    found = set()
    for report in reports:
        going = travelling(image, report)
        found |= {(canonical(item["metadata"]["name"]), item["metadata"]["version"]) for item in report["install"]
                  if canonical(item["metadata"]["name"]) in going}
    return [f"{name}=={version}" for name, version in sorted(found) if name not in BUILT_HERE]


def stub_wheel(folder: Path, name: str, version: str) -> Path:
    """A wheel of `name` at `version` that holds and needs nothing. The resolution here takes it for the machine's own
    torch: the real one's CUDA libraries (gigabytes, tagged for that machine's glibc) are then never looked at."""
    dist = f"{canonical(name).replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: wheel_list\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    digest = {n: base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=").decode()
              for n, t in files.items()}
    listed = "".join(f"{member},sha256={digest[member]},{len(files[member])}\n" for member in digest)
    files[f"{info}/RECORD"] = f"{listed}{info}/RECORD,,\n"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


def stubs(image: dict[str, str | None], folder: Path) -> list[str]:
    """Write a `stub_wheel` of each of `TORCH_OWN` the image holds at a known version, as `version+image`; returns the
    constraints that make the resolution take them (`name==version+image`)."""
    folder.mkdir(parents=True, exist_ok=True)
    constraints = []
    for name in TORCH_OWN:
        if image.get(name):
            stub_wheel(folder, name, f"{image[name]}+image")
            constraints.append(f"{name}=={image[name]}+image")
    return constraints


if __name__ == "__main__":
    command, image_file, *rest = sys.argv[1:]
    image = read_image(Path(image_file))
    if command == "ceilings":
        print("\n".join(ceilings(image, project_requirements(Path(rest[0]), rest[1:]))))
    elif command == "carry":
        print("\n".join(carry(image, [json.loads(Path(path).read_text()) for path in rest])))
    elif command == "stub":
        print("\n".join(stubs(image, Path(rest[0]))))
    else:
        sys.exit(f"wheel_list.py: unknown command {command!r}; commands: ceilings, carry, stub")
