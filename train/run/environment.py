"""The software a run uses: each dependency's installed version, the range the `lineage` package declares for it
and the releases the test suite passed on (`TESTED`). docs/using.md ("Supported versions").
"""

from __future__ import annotations

import os
import platform
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

# library -> (oldest, newest) release the test suite passed on (.ci/run's jobs); docs/using.md shows the table
TESTED = {
    "torch": ("2.10.0", "2.15.0"),
    "transformers": ("5.23.0", "5.24.0"),
    "accelerate": ("1.9.0", "1.15.0"),
    "datasets": ("4.8.4", "5.2.0"),
    "tokenizers": ("0.23.3", "0.23.3"),
}
# Python's minor releases the whole suite passed on: 3.11 in CI, 3.12 and 3.13 once (2026-11-28; docs/using.md)
TESTED_PYTHON = ("3.11", "3.13")
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def declared_ranges() -> dict[str, SpecifierSet]:
    """The version range of each dependency, from the installed package's metadata (or, in a checkout that was
    not installed, from its `pyproject.toml`)."""
    try:
        lines = metadata.requires("lineage") or []
    except metadata.PackageNotFoundError:
        lines = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    requirements = [Requirement(line) for line in lines]
    return {r.name: r.specifier for r in requirements if r.marker is None}


def declared_python() -> SpecifierSet:
    """The Python releases the package declares (`requires-python`), as `declared_ranges` finds the libraries'."""
    try:
        spec = metadata.metadata("lineage")["Requires-Python"]
    except metadata.PackageNotFoundError:
        spec = tomllib.loads(PYPROJECT.read_text())["project"]["requires-python"]
    return SpecifierSet(spec or "")


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """Python and the libraries of `TESTED`, as installed (None: not installed)."""
    return {"python": platform.python_version(), **{name: installed(name) for name in TESTED}}


def device() -> str:
    import torch

    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    if torch.backends.mps.is_available():
        return "mps"
    threads = torch.get_num_threads()
    return f"cpu ({platform.machine()}, {threads} thread{'s' if threads != 1 else ''})"


def device_refusal(name: str) -> str | None:
    """Why torch cannot run a model on the device `name` on this machine, as the end of a sentence that names it
    (None: it can). torch itself refuses one only at the first tensor moved there."""
    import torch

    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        device = None
    backend = getattr(torch, device.type, None) if device is not None and device.type != "cpu" else None
    if device is None or device.type != "cpu" and not hasattr(backend, "device_count"):
        return " is no device torch runs a model on: give cpu, cuda, cuda:N, mps or xpu"
    count = backend.device_count() if backend is not None and backend.is_available() else 0
    if backend is None or (device.index or 0) < count:
        return None
    kind = device.type
    found = (f"has {count} {kind} device{'s' if count > 1 else ''} ({kind}:0 to {kind}:{count - 1})" if count
             else f"has no {kind} device that torch {torch.__version__} can use")
    return f": this machine {found}; give one it has, or cpu"


def accelerator_on(name: str):
    """One process's Accelerator, placing a model and its batches on the device `name` with its index: Accelerate
    places a lone process on its backend's current device (`cuda`, cuda:0 unless set), so `cuda:1` is made current."""
    import torch
    from accelerate import Accelerator

    device = torch.device(name)
    backend = getattr(torch, device.type)
    if device.index is not None and hasattr(backend, "set_device"):  # mps has one device, and no set_device
        backend.set_device(device)
    return Accelerator(cpu=device.type == "cpu")


def name_cpu_for_deepspeed() -> None:
    """On a machine with no accelerator, tell DeepSpeed the CPU it would pick (DS_ACCELERATOR, unless set), so that it
    does not warn that it picked it: Accelerate and transformers import it wherever it is installed, also to save.
    A process that has not imported torch (`lineage configs`, `lineage env`) reaches no DeepSpeed, and is not made to
    import torch for this."""
    torch = sys.modules.get("torch")
    if torch is not None and not torch.accelerator.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")


def status(name: str, version: str | None, declared: SpecifierSet | None,
           tested: tuple[str, str] | None = None) -> str:
    """Where an installed release stands: outside the declared range, inside the tested span (`tested`, by default
    `TESTED[name]`; compared at its precision: a span of minor releases holds their patch releases), or declared but
    untested."""
    if version is None:
        return "not installed"
    if declared is not None and not declared.contains(version, prereleases=True):
        return f"OUTSIDE the declared range {declared}"
    tested = tested or TESTED[name]
    oldest, newest = (Version(v) for v in tested)
    here = Version(".".join(str(part) for part in Version(version).release[:len(newest.release)]))
    if oldest <= here <= newest:
        return "tested"
    return f"in the declared range, untested (tested {tested[0]} to {tested[1]})"


def report() -> list[tuple[str, str, str, str]]:
    """(name, installed version, declared range, status) for Python and every library of `TESTED`."""
    declared = declared_ranges()
    python, declared_py = platform.python_version(), declared_python()
    rows = [("python", python, str(declared_py), status("python", python, declared_py, TESTED_PYTHON))]
    for name in TESTED:
        version = installed(name)
        rows.append((name, version or "-", str(declared.get(name, "")), status(name, version, declared.get(name))))
    return rows


__all__ = ["TESTED", "TESTED_PYTHON", "declared_python", "declared_ranges", "device", "name_cpu_for_deepspeed",
           "report", "status", "versions"]
