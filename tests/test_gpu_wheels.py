"""The run package of the GPU check (tools/gpu_wheels.sh, tools/wheel_list.py, tools/gpu_run.sh), offline: what is
downloaded leaves out the GPU machine's own torch and what is built here, the parts fit the device's carry limit, the
wheels folder is git-ignored, and the run script never installs torch."""

import importlib.util
import subprocess

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

spec = importlib.util.spec_from_file_location("wheel_list", REPO / "tools" / "wheel_list.py")
wheel_list = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wheel_list)


def test_the_list_leaves_out_torch_and_its_own_and_what_is_built_here():
    names = ["Transformers", "torch", "nvidia-cublas", "triton", "Jinja2", "lineage", "deepspeed", "py_cpuinfo",
             "typing_extensions"]
    report = {"install": [{"metadata": {"name": name, "version": "1.0"}} for name in names]}
    assert wheel_list.requirements(report) == ["py-cpuinfo==1.0", "transformers==1.0"]


@settings(max_examples=50, deadline=None, derandomize=True)
@given(st.dictionaries(st.text("abc", min_size=1, max_size=4), st.integers(1, 100), max_size=12),
       st.integers(10, 120))
def test_the_parts_hold_every_wheel_once_within_the_limit(sizes, limit):
    parts = wheel_list.split(sizes, limit)
    assert sorted(name for part in parts for name in part) == sorted(sizes)
    assert all(sum(sizes[n] for n in part) <= limit or len(part) == 1 for part in parts)


def test_the_wheels_folder_is_ignored_and_the_run_script_never_installs_torch():
    ignored = subprocess.run(["git", "check-ignore", "-q", "gpu-wheels/part-1/x.whl"], cwd=REPO)
    if ignored.returncode == 128:
        pytest.skip("not a git checkout")
    assert ignored.returncode == 0
    run = (REPO / "tools" / "gpu_run.sh").read_text()
    assert "--no-index" in run and "torch-*.whl" in run and "train.gpu_check --output_dir" in run
    for script in ("gpu_wheels.sh", "gpu_run.sh"):
        assert subprocess.run(["bash", "-n", str(REPO / "tools" / script)]).returncode == 0
