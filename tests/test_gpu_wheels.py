"""The run package of the GPU check (tools/gpu_wheels.sh, tools/wheel_list.py, tools/gpu_image.txt,
tools/gpu_run.sh), offline: what is downloaded leaves out what the GPU machine's image holds at a version the project
accepts, and never torch; the resolution is capped at the image's versions the project accepts; the wheels folder is
git-ignored, and the run script pins the machine's own torch."""

import importlib.util
import os
import shlex
import subprocess
import sys

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

spec = importlib.util.spec_from_file_location("wheel_list", REPO / "tools" / "wheel_list.py")
wheel_list = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wheel_list)

IMAGE = wheel_list.read_image(REPO / "tools" / "gpu_image.txt")
names = st.sampled_from(["torch", "triton", "nvidia-cublas-cu12", "cuda-bindings", "lineage", "deepspeed",
                         "transformers", "datasets", "dill", "fsspec", "pyarrow", "matplotlib", "peft", "pydantic"])
versions = st.sampled_from(["1.0", "2.0", "3.0"])
OWN = ("torch", "triton", "lineage", "deepspeed")


def _report(packages: dict[str, str], requires: dict[str, list[str]], requested: set[str] = frozenset()) -> dict:
    return {"install": [{"metadata": {"name": name, "version": version, "requires_dist": requires.get(name, [])},
                         "requested": name in requested} for name, version in packages.items()], "environment": {}}


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.dictionaries(names, st.none() | versions), st.dictionaries(names, versions, min_size=1),
       st.lists(st.tuples(names, names, st.sampled_from(["", ">=2.0", "<=2.0", "==1.0"])), max_size=6),
       st.sets(names, max_size=3))
def test_what_travels_is_what_the_asked_for_packages_need_and_the_image_lacks(image, resolved, edges, roots):
    """Never torch, its CUDA libraries or what is built here; each listed package is asked for (a root the image
    lacks) or needed by one that travels; whatever a travelling package needs and the image lacks entirely travels."""
    requires: dict[str, list[str]] = {}
    for parent, child, specifier in edges:
        requires.setdefault(parent, []).append(child + specifier)
    listed = dict(line.split("==") for line in wheel_list.carry(image, [_report(resolved, requires, roots)]))
    going = set(listed) | {name for name in roots & set(resolved) if name in ("lineage", "deepspeed")}
    for name, version in listed.items():
        assert name not in OWN and not name.startswith(("nvidia-", "cuda-")) and version == resolved[name]
        assert (name in roots and name not in image) or any(p in going for p, c, _ in edges if c == name), name
    for parent, child, _ in edges:
        if parent in going and child in resolved and child not in image and child not in OWN \
                and not child.startswith(("nvidia-", "cuda-")):
            assert child in listed, (parent, child)


def test_a_package_travels_for_what_a_travelling_one_asks_not_for_what_the_image_holds():
    """transformers too old on the image travels, and so does the regex it floors (version unknown there); sympy,
    asked only by the image's torch, stays; matplotlib's and pyarrow's floors are trusted (TRUSTED_FLOORS)."""
    image = {"torch": "2.11.0", "transformers": "5.17.0", "regex": None, "sympy": None, "matplotlib": None,
             "pyarrow": None}
    packages = {"lineage": "0.1", "torch": "2.11.0", "transformers": "5.24.0", "regex": "2026.1", "sympy": "1.14",
                "matplotlib": "3.10", "datasets": "5.2", "pyarrow": "24.0"}
    requires = {"lineage": ["torch>=2.4", "transformers>=5.23", "matplotlib>=3.7", "datasets>=4.3"],
                "transformers": ["regex>=2025.10.22"], "torch": ["sympy>=1.13.3"], "datasets": ["pyarrow>=24.0.0"]}
    assert wheel_list.carry(image, [_report(packages, requires, {"lineage"})]) == [
        "datasets==5.2", "regex==2026.1", "transformers==5.24.0"]


def test_each_version_of_several_resolutions_travels_once():
    reports = [_report({"datasets": version, "dill": "0.4.1"}, {"datasets": ["dill"]}, {"datasets"})
               for version in ("5.2", "4.8")]
    assert wheel_list.carry({}, reports) == ["datasets==4.8", "datasets==5.2", "dill==0.4.1"]


def test_the_ceilings_are_the_image_versions_the_project_accepts():
    requirements = wheel_list.project_requirements(REPO / "pyproject.toml", ["peft", "pytest"])
    pinned = dict(line.split("<=") for line in wheel_list.ceilings(IMAGE, requirements))
    assert IMAGE["torch"] and pinned["torch"] == IMAGE["torch"]
    for name, version in IMAGE.items():
        accepted = all(r.specifier.contains(version, prereleases=True) for r in requirements
                       if version and wheel_list.canonical(r.name) == name)
        assert pinned.get(name, "not pinned") == (version if version and accepted else "not pinned"), name


def test_a_bad_image_line_is_refused_naming_its_line(tmp_path):
    (tmp_path / "image.txt").write_text("# packages\ntorch==2.11.0\nnumpy==\n")
    with pytest.raises(ValueError, match=r"image.txt:3: .*'numpy=='"):
        wheel_list.read_image(tmp_path / "image.txt")


def test_the_wheels_folder_is_ignored_and_the_run_script_pins_the_machines_torch():
    ignored = subprocess.run(["git", "check-ignore", "-q", "gpu-wheels/x.whl"], cwd=REPO)
    if ignored.returncode == 128:
        pytest.skip("not a git checkout")
    assert ignored.returncode == 0
    run = (REPO / "tools" / "gpu_run.sh").read_text()
    assert "--no-index" in run and '-c "$constraints"' in run
    assert "torch-*.whl" in run and "train.gpu_check --output_dir" in run
    for script in ("gpu_wheels.sh", "gpu_run.sh"):
        assert subprocess.run(["bash", "-n", str(REPO / "tools" / script)]).returncode == 0


def test_the_run_scripts_torch_constraint_admits_the_installed_torch(tmp_path):
    """The constraint the run script writes, run here where the imported torch says another version than its
    distribution: it must admit the installed distribution (on the GPU image `torch.__version__` said 2.11.0+cu130
    while the distribution is 2.11.0, and a pin at the former refused every install)."""
    from importlib.metadata import version

    from packaging.requirements import Requirement

    run = (REPO / "tools" / "gpu_run.sh").read_text()
    line = next(line for line in run.splitlines() if line.endswith('> "$constraints"'))
    program = shlex.split(line.split(">")[0])[2]  # "$python" -c '<program>'
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text('__version__ = "0.0.1+elsewhere"\n')
    written = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(tmp_path)}).stdout
    requirement = Requirement(written.strip())
    assert requirement.name == "torch"
    assert requirement.specifier.contains(version("torch"), prereleases=True)


FAKE_PYTHON = """#!/usr/bin/env bash
# stands for the GPU machine's python: records each call; the install fails when FAIL_INSTALL is set
echo "$*" >> "$CALLS"
if [ "$1" = -c ]; then echo "torch==2.11.0+cu130"; exit 0; fi
if [ "$2" = pip ] && [ "$3" = install ]; then
    for arg in "$@"; do case "$prev" in -c) cp "$arg" "$CALLS.constraints";; esac; prev=$arg; done
    [ -z "${FAIL_INSTALL:-}" ]; exit $?
fi
if [ "$2" = train.gpu_check ]; then
    mkdir -p "$4/benchmark/logs" "$4/training/killed_run/logs" "$4/cache"
    echo report > "$4/report.md"; echo {} > "$4/report.json"; echo log > "$4/benchmark/logs/gpt.log"
    echo {} > "$4/training/killed_run/logs/metrics.jsonl"; echo weights > "$4/cache/model.safetensors"
    exit 3
fi
exit 0
"""


@pytest.mark.parametrize("install_fails", [False, True])
def test_the_run_script_pins_torch_runs_the_check_and_brings_back_its_report_and_logs(tmp_path, install_fails):
    """gpu_run.sh with a stand-in python: the install pins the machine's torch; the check runs (also after a failed
    install) with what is left of the seconds; $OUT gets report.md, report.json and the logs' archive, not the
    check's large files; the script exits with the check's status."""
    import tarfile

    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    wheels, out, calls = tmp_path / "wheels", tmp_path / "OUT", tmp_path / "calls"
    wheels.mkdir()
    out.mkdir()
    (wheels / "top-level.txt").write_text("lineage\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "OUT": str(out), "CALLS": str(calls),
           **({"FAIL_INSTALL": "1"} if install_fails else {})}
    result = subprocess.run(["bash", str(REPO / "tools" / "gpu_run.sh"), str(wheels), str(tmp_path / "check")],
                            env=env, capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert (calls.parent / "calls.constraints").read_text().strip() == "torch==2.11.0+cu130"
    check = next(line for line in calls.read_text().splitlines() if "train.gpu_check" in line).split()
    assert check[check.index("--output_dir") + 1] == str(tmp_path / "check")
    assert 0 < int(check[check.index("--budget_seconds") + 1]) <= 570
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check-logs.tar.gz", "report.json", "report.md"]
    with tarfile.open(out / "gpu-check-logs.tar.gz") as archive:
        assert sorted(archive.getnames()) == ["./benchmark/logs/gpt.log", "./training/killed_run/logs/metrics.jsonl"]
    assert ("the offline install failed" in result.stderr) == install_fails


def test_the_machines_torch_stands_in_as_an_empty_wheel_pip_resolves_offline(tmp_path):
    """`wheel_list.py stub`: a dependency-free wheel of each of torch and triton at the image's version, which the
    resolution takes (its constraint) instead of the registry's torch, whose CUDA libraries are tagged for the GPU
    machine's glibc and which pip here could not resolve (2026-11-28: `nvidia-cudnn-cu13==9.19.0.56` has only
    manylinux_2_27 wheels)."""
    import json

    constraints = wheel_list.stubs(IMAGE, tmp_path / "stub")
    assert constraints == [f"{name}=={IMAGE[name]}+image" for name in ("torch", "triton") if IMAGE.get(name)]
    assert constraints and "torch" in constraints[0]
    (tmp_path / "c.txt").write_text("\n".join(constraints) + "\n")
    resolved = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--no-index",
         "--find-links", str(tmp_path / "stub"), "--target", str(tmp_path / "unused"), "--report",
         str(tmp_path / "r.json"), "-c", str(tmp_path / "c.txt"), f"torch>={IMAGE['torch']}"],
        capture_output=True, text=True, env={**os.environ, "PIP_CONSTRAINT": "", "PIP_CONFIG_FILE": os.devnull})
    assert resolved.returncode == 0, resolved.stderr
    [install] = json.loads((tmp_path / "r.json").read_text())["install"]
    assert install["metadata"]["version"] == f"{IMAGE['torch']}+image"
    assert not install["metadata"].get("requires_dist")
    assert wheel_list.carry(IMAGE, [json.loads((tmp_path / "r.json").read_text())]) == []
