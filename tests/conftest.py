"""Shared test setup: offline hub, deterministic seeds, one torch thread per test process, preset loading and a
clean-process runner that proves saved folders load without this project."""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["LINEAGE_CACHE"] = tempfile.mkdtemp(prefix="lineage-cache-")  # what runs keep for later ones, per session
atexit.register(shutil.rmtree, os.environ["LINEAGE_CACHE"], ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import AutoConfig  # noqa: E402

import modeling  # noqa: E402,F401  (registers the Lineage families with the Auto classes)
from train.data.batching import EXACT_STREAM_RESUME, stream_resume_problem  # noqa: E402
from train.data.corpus import tokenizer_training_texts  # noqa: E402
from train.data.tokenization import config_kwargs_from_tokenizer, train_tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PRESETS = REPO / "train" / "configs" / "models"
# a test that resumes a streamed run: under an older datasets the engine refuses that resume (stream_resume_problem)
exact_resume = pytest.mark.skipif(stream_resume_problem() is not None,
                                  reason=f"datasets < {EXACT_STREAM_RESUME} restores a stream's position inexactly")

# the tiny test models run fastest on one thread (and several test processes can share the machine)
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def exact_linear(monkeypatch):
    """Linear layers on `F.linear`, the reference's kernel: token-for-token comparisons with transformers then
    test the conversion alone, not how two CPU kernels round (`LineageLinear` is tested in test_layers.py)."""
    from modeling.linear import LineageLinear

    monkeypatch.setattr(LineageLinear, "fast_cpu_inference", False)


def preset(name: str, **overrides):
    """The config of `train/configs/models/<name>.json`, with overrides."""
    fields = json.loads((PRESETS / f"{name}.json").read_text())
    return AutoConfig.for_model(fields.pop("model_type"), **{**fields, **overrides})


def model_folder(root: Path, family: str, model_class, vocab_size: int, **fields) -> Path:
    """A tiny randomly initialised model with a tokenizer trained on the embedded corpus, saved as a run saves it."""
    folder = root / family
    tokenizer = train_tokenizer("seq2seq" if family == "transformer" else family, tokenizer_training_texts(size=300),
                                vocab_size, model_max_length=128)
    config = preset(f"{family}-tiny", **{**config_kwargs_from_tokenizer(tokenizer, "seq2seq" if family ==
                                                                          "transformer" else family), **fields})
    model_class(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def hub_dataset(cache: Path, repo: str, config: str, splits: dict[str, Path], features=None) -> str:
    """`repo` (configuration `config`) as an online `load_dataset(repo, config)` leaves it in the datasets cache `cache`
    (`<namespace>___<name>/<config>/<version>/<commit>/` holding `<name>-<split>.arrow` and `dataset_info.json`): made
    from the JSON Lines file of each split by the JSON builder a Hub load of JSON files runs, moved where the Hub's copy
    would be. Returns `repo`."""
    from datasets.packaged_modules.json.json import Json

    namespace, name = repo.split("/")
    builder = Json(data_files={split: [str(path)] for split, path in splits.items()}, dataset_name=name,
                   config_name=config, cache_dir=str(cache), hash="0" * 40, features=features)
    builder.download_and_prepare()
    target = cache / f"{namespace}___{name}" / config
    target.mkdir(parents=True)
    Path(builder.cache_dir).parent.rename(target / "0.0.0")
    return repo


def run_clean_process(code: str, cwd: Path, python: str = sys.executable) -> str:
    """Run `code` in `python -I` (this interpreter, or another environment's) from `cwd` with `modeling` and `train`
    made unimportable; return its stdout."""
    prelude = "import sys\nsys.modules['modeling'] = None\nsys.modules['train'] = None\n"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run(
        [python, "-I", "-c", prelude + code], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"clean process failed:\n{result.stderr[-4000:]}"
    return result.stdout
