"""The package as a user installs it: a wheel built from a copy of this checkout, installed without its
dependencies into a fresh virtual environment that reuses this environment's packages, and run from an empty
folder with the checkout nowhere on `sys.path` (the wheel's own `modeling` and `train` are imported, which the
test checks, so a module or a config file missing from the wheel fails here).

The build needs setuptools >= 77 (pyproject's build-system); where this environment has it the wheel is built
without build isolation, so the test needs no package index."""

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from conftest import REPO
from packaging.version import Version

SOURCES = ("pyproject.toml", "README.md", "LICENSE", "modeling", "train")


def _setuptools_version() -> Version:
    try:
        return Version(version("setuptools"))
    except PackageNotFoundError:
        return Version("0")


def _run(cmd: list, cwd: Path, timeout: int = 300) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the checkout only through the wheel
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """The wheel, and a virtual environment with it installed: its python, its `lineage` and its site-packages."""
    root = tmp_path_factory.mktemp("installed")
    source = root / "source"  # a copy: the build writes build/ and *.egg-info beside the sources
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    isolation = [] if _setuptools_version() < Version("77") else ["--no-build-isolation"]
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", root / "dist", source], root)
    (wheel,) = (root / "dist").glob("lineage-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", venv], root)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    venv_site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root).strip())
    # this environment's packages (torch, transformers, pip...), also where it is itself a virtual environment
    ours = sorted({*site.getsitepackages(), sysconfig.get_paths()["purelib"]})
    (venv_site / "test_environment.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in ours) + "\n")
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", wheel], root)
    lineage = python.parent / ("lineage.exe" if os.name == "nt" else "lineage")
    return {"wheel": wheel, "python": python, "lineage": lineage, "site": venv_site}


def test_the_wheel_holds_every_package_the_configs_and_the_licence(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    sources = {p.relative_to(REPO).as_posix() for d in ("modeling", "train") for p in (REPO / d).rglob("*.*")
               if "__pycache__" not in p.parts}
    assert {"modeling/__init__.py", *(f"train/{layer}/__init__.py" for layer in ("data", "run", "setup", "analysis")),
            "train/metrics/bleu.py",
            "train/configs/recipes/main-gpt-pretrain.yaml", "train/configs/accelerate/fsdp.yaml"} <= sources
    assert sources <= names  # every module, metric module, preset, recipe and accelerate config
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(installed["wheel"]).read(metadata).decode()


def test_the_installed_package_runs_from_an_empty_folder(installed, tmp_path):
    work = tmp_path / "empty"
    work.mkdir()
    where = json.loads(_run([installed["python"], "-c", (
        "import json, sys, modeling, train, train.run.recipes as r\n"
        "print(json.dumps({'modeling': modeling.__file__, 'train': train.__file__, 'path': sys.path,"
        " 'recipes': str(r.CONFIGS)}))")], work))
    for name in ("modeling", "train", "recipes"):
        assert Path(where[name]).is_relative_to(installed["site"]), (name, where[name])
    # folders on the path (an editable install of the checkout adds a path-hook marker, no folder: the imports above
    # show that it does not serve `modeling` or `train` here), but this environment's, which may be a `.venv` inside
    # the checkout
    environment = Path(sys.prefix).resolve()
    folders = [Path(p).resolve() for p in where["path"] if p and Path(p).is_absolute()]
    assert not [p for p in folders if p.is_relative_to(REPO) and not p.is_relative_to(environment)], where["path"]

    usage = _run([installed["lineage"], "--help"], work)
    assert "lineage train <script>" in usage and "main_job" in usage and "configs" in usage
    fsdp = Path(_run([installed["lineage"], "configs", "accelerate/fsdp"], work).strip())
    assert fsdp.is_file() and fsdp.is_relative_to(installed["site"])

    # the main job's smoke run: recipes by name from the package data, outputs relative to the working folder
    _run([installed["lineage"], "train", "main_job", "--quick", "--progress_bar", "false"], work)
    root = work / "outputs" / "main-job"
    stages = {row["name"]: row for row in json.loads((root / "summary.json").read_text())["stages"]}
    assert set(stages) == {"bert-pretrain", "bert-nli", "gpt-pretrain", "gpt-nli", "translation", "rnn-translation"}
    assert all((work / row["folder"]).is_dir() for row in stages.values())
    loaded = json.loads(_run([installed["python"], "-c", LOAD, root / "gpt-pretrain" / "model",
                              root / "translation" / "model"], work))
    assert loaded["classes"] == ["LineageGptForCausalLM", "LineageTransformerForConditionalGeneration"]
    assert all(Path(file).is_relative_to(installed["site"]) for file in loaded["files"])
    assert loaded["new_tokens"] == [3, 3]


# from_pretrained of what the main job wrote, through the Auto classes, and a few greedy tokens from each
LOAD = """
import json, sys, transformers
import modeling  # the installed package registers the Lineage families with the Auto classes
out = {"classes": [], "files": [], "new_tokens": []}
for folder, auto in zip(sys.argv[1:], (transformers.AutoModelForCausalLM, transformers.AutoModelForSeq2SeqLM)):
    model, tokenizer = auto.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("six hundred forty-one books", return_tensors="pt").input_ids
    generated = model.generate(ids, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    prompt = 1 if model.config.is_encoder_decoder else ids.shape[1]  # the decoder's start token, or the prompt
    out["classes"].append(type(model).__name__)
    out["files"].append(sys.modules[type(model).__module__].__file__)
    out["new_tokens"].append(generated.shape[1] - prompt)
print(json.dumps(out))
"""
