"""`train.run.environment` and `lineage env`: the installed releases, the range the package declares and the span
the test suite passed on, one table that the docs, `pyproject.toml` and `.ci/constraints-floor.txt` agree with."""

import re

import pytest
import transformers
from conftest import REPO
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from train import env
from train.run import environment
from train.run.environment import TESTED, declared_ranges, status, versions


def test_lineage_env_prints_every_library_its_range_and_whether_it_was_tested(capsys):
    env.main([])
    out = capsys.readouterr().out
    for name in TESTED:
        assert re.search(rf"^{name}\s+\S+", out, re.M), name
    assert re.search(rf"^transformers\s+{re.escape(transformers.__version__)}\s+\S+\s+tested$", out, re.M)
    assert re.search(r"^python\s+3\.\d+\.\d+\s+>=3\.11\s+tested$", out, re.M) and "device: cpu" in out


@pytest.mark.parametrize("version, expected", [
    ("5.24.0", "tested"), ("5.24.0.dev0", "tested"), ("5.24.3", "in the declared range, untested"),
    ("4.57.1", "OUTSIDE the declared range"), ("5.25.0", "OUTSIDE the declared range"), (None, "not installed"),
])
def test_status_tells_tested_untested_and_outside(monkeypatch, version, expected):
    monkeypatch.setitem(TESTED, "transformers", ("5.1.0", "5.24.0"))
    assert status("transformers", version, SpecifierSet(">=5.1,<5.25")).startswith(expected)


@pytest.mark.parametrize("version, expected", [
    ("3.11.7", "tested"), ("3.12.1", "tested"), ("3.13.9", "tested"), ("3.14.0", "in the declared range, untested"),
    ("3.10.13", "OUTSIDE the declared range"),
])
def test_python_is_tested_by_minor_release_against_requires_python(version, expected):
    assert status("python", version, environment.declared_python(), environment.TESTED_PYTHON).startswith(expected)
    assert str(environment.declared_python()) == f">={environment.TESTED_PYTHON[0]}"


def test_the_declared_range_is_the_tested_one():
    """Each floor `pyproject.toml` declares is the oldest release tested (the floor job's constraints); the
    transformers ceiling is the next minor release after the newest tested, raised only with a test run; the README's
    torch lies between the two ends."""
    declared = declared_ranges()
    floor = dict(line.split("==") for line in (REPO / ".ci" / "constraints-floor.txt").read_text().splitlines()
                 if line and not line.startswith("#"))
    for name in ("torch", "transformers", "accelerate", "datasets", "tokenizers"):
        oldest, newest = TESTED[name]
        assert [Version(s.version) for s in declared[name] if s.operator == ">="] == [Version(oldest)], name
        assert floor[name] == oldest, name
        assert declared[name].contains(newest)
    newest = Version(TESTED["transformers"][1])
    ceiling = [Version(s.version) for s in declared["transformers"] if s.operator == "<"]
    assert ceiling == [Version(f"{newest.major}.{newest.minor + 1}")]
    readme_torch = re.search(r"pip install torch==(\S+) &&", (REPO / "README.md").read_text())[1]
    assert Version(TESTED["torch"][0]) <= Version(readme_torch) <= Version(TESTED["torch"][1])


def test_the_docs_table_is_the_tested_table():
    page = (REPO / "docs" / "using.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| ([\d.]+) \| ([\d.]+) \|", page, re.M)
    assert {name: (floor, newest) for name, floor, newest in rows} == TESTED


def test_versions_name_python_and_every_library():
    recorded = versions()
    assert set(recorded) == {"python", *TESTED} and recorded["transformers"] == transformers.__version__
    assert environment.installed("no-such-distribution") is None


def test_a_device_this_machine_lacks_is_refused_naming_what_it_has(monkeypatch):
    import torch

    assert environment.device_refusal("cpu") is None and environment.device_refusal("cpu:0") is None
    assert environment.device_refusal("gpu") == (" is no device torch runs a model on: give cpu, cuda, cuda:N, mps or "
                                                 "xpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert environment.device_refusal("cuda") is None and environment.device_refusal("cuda:1") is None
    assert environment.device_refusal("cuda:3") == (": this machine has 2 cuda devices (cuda:0 to cuda:1); give one it "
                                                    "has, or cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert environment.device_refusal("cuda") == (f": this machine has no cuda device that torch {torch.__version__} "
                                                  "can use; give one it has, or cpu")
