"""`lineage average` and the recipe key `average_last_checkpoints`: the average of identical checkpoints is them, of
different ones each tensor's mean; the output loads as a model folder with its tokenizer and card; checkpoints and
model folders of another config or vocabulary are refused naming the first difference, and no input changes."""

import hashlib
import shutil
from pathlib import Path

import pytest
import torch
from conftest import preset
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from modeling import LineageGptForCausalLM
from train import average, pretrain_gpt
from train.data.tokenization import train_tokenizer
from train.run.averaging import AveragingError
from train.run.recipes import RecipeError, recipe_from_dict
from train.run.run_folder import OutputDirError

RUN = ["--recipe", "gpt-pretrain-tiny", "--progress_bar", "false", "--max_steps", "4", "--save_steps", "2",
       "--save_total_limit", "3", "--eval_size", "4", "--max_new_tokens", "2"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny GPT run that kept checkpoints at steps 2 and 4 and published their average."""
    root = tmp_path_factory.mktemp("averaged") / "run"
    results, _ = pretrain_gpt.main([*RUN, "--output_dir", str(root), "--average_last_checkpoints", "2"])
    assert results["averaged_checkpoints"] == "step-00000002, step-00000004"
    return root


def checkpoint(run: Path, step: int) -> Path:
    return run / "checkpoints" / f"step-{step:08d}"


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def mean(*parts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: (sum(p[k].double() for p in parts) / len(parts)).to(parts[0][k].dtype) for k in parts[0]}


def fingerprints(*folders: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for f in folders for p in sorted(f.rglob("*"))
            if p.is_file()}


def test_the_average_of_identical_checkpoints_is_them(run, tmp_path):
    twin = tmp_path / "twin"
    shutil.copytree(checkpoint(run, 4), twin)
    out = average.main([str(checkpoint(run, 4)), str(twin), "--output_dir", str(tmp_path / "avg")])
    original, averaged = weights(checkpoint(run, 4)), weights(out)
    assert averaged.keys() == original.keys()
    assert all(torch.equal(averaged[k], original[k]) for k in original)


def test_one_checkpoint_alone_makes_a_model_folder_of_its_weights(run, tmp_path, capsys):
    """A step to evaluate (before: refused, 'give two or more'; no command made a checkpoint a model folder)."""
    out = average.main([str(checkpoint(run, 2)), "--output_dir", str(tmp_path / "step-2")])
    original = weights(checkpoint(run, 2))
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)
    assert all(torch.equal(model.state_dict()[k], original[k]) for k in original)
    assert "whose weights are those of one checkpoint of a Lineage run" in (out / "README.md").read_text()
    assert "saved those of one checkpoint of a Lineage run" in capsys.readouterr().out


def test_the_average_of_different_checkpoints_is_each_tensors_mean_and_loads(run, tmp_path):
    inputs = [checkpoint(run, 2), checkpoint(run, 4)]
    before = fingerprints(run)
    out = average.main([*map(str, inputs), "--output_dir", str(tmp_path / "avg")])
    assert fingerprints(run) == before
    expected, got = mean(*map(weights, inputs)), weights(out)
    assert any(not torch.equal(weights(inputs[0])[k], weights(inputs[1])[k]) for k in expected)
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in expected)
    model = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)
    state = model.state_dict()
    assert all(torch.equal(state[k], expected[k]) for k in expected)
    assert AutoTokenizer.from_pretrained(out).get_vocab() == AutoTokenizer.from_pretrained(run / "model").get_vocab()
    card = (out / "README.md").read_text()
    assert all(f"- `checkpoints/{path.name}`" in card for path in inputs) and "checkpoint-averaging" in card
    assert str(tmp_path) not in card and str(run) not in card  # a card to publish names no path of this machine


def test_average_last_checkpoints_publishes_the_mean_of_the_last_ones(run):
    expected = mean(weights(checkpoint(run, 2)), weights(checkpoint(run, 4)))
    published = weights(run / "model")
    assert all(torch.equal(published[k], expected[k]) for k in expected)


def test_a_model_folder_and_a_checkpoint_of_its_run_average(run, tmp_path):
    out = average.main([str(run / "model"), str(checkpoint(run, 2)), "--output_dir", str(tmp_path / "avg")])
    expected = mean(weights(run / "model"), weights(checkpoint(run, 2)))
    assert all(torch.equal(weights(out)[k], expected[k]) for k in expected)


def other_folder(run: Path, tmp_path: Path, layers: int | None = None, vocabulary: bool = False,
                 family: str | None = None) -> Path:
    """A model folder like the run's, with another number of layers, another tokenizer or a model of another
    family (a preset's)."""
    folder = tmp_path / "other"
    shutil.copytree(run / "model", folder)
    if family is not None:
        preset(family).save_pretrained(folder)
    if layers is not None:
        config = AutoConfig.from_pretrained(run / "model")
        config.num_hidden_layers = layers
        LineageGptForCausalLM(config).save_pretrained(folder)
    if vocabulary:
        train_tokenizer("gpt", ["some other text to learn", "another vocabulary"] * 4, 300).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(("change", "named"), [({"layers": 1}, "'num_hidden_layers' (1 against 2)"),
                                               ({"vocabulary": True}, "tokenizers differ, first in 'tokens'"),
                                               ({"family": "bert-tiny"}, "first in 'model_type'")])
def test_another_config_or_vocabulary_is_refused_naming_the_first_difference(run, tmp_path, change, named):
    other = other_folder(run, tmp_path, **change)
    with pytest.raises(AveragingError, match=named.replace("(", r"\(").replace(")", r"\)")):
        average.main([str(checkpoint(run, 4)), str(other), "--output_dir", str(tmp_path / "avg")])
    assert not (tmp_path / "avg").exists()


def test_bad_inputs_are_refused_by_name_before_anything_is_written(run, tmp_path, capsys):
    with pytest.raises(SystemExit):  # a copy, not an average: one checkpoint alone makes a model folder
        average.main([str(run / "model"), "--output_dir", str(tmp_path / "avg")])
    assert (f"INPUT: give two or more checkpoints or model folders to average, or one checkpoint to make a model "
            f"folder of, got '{run / 'model'}'") in capsys.readouterr().err
    with pytest.raises(SystemExit):  # (before: averaged, its card listing the one checkpoint twice)
        average.main([str(checkpoint(run, 4)), f"{checkpoint(run, 4)}/", "--output_dir", str(tmp_path / "avg")])
    assert (f"INPUT: '{checkpoint(run, 4)}' and '{checkpoint(run, 4)}/' name the same folder; give each checkpoint or "
            "model once") in capsys.readouterr().err
    with pytest.raises(AveragingError, match="INPUT 'nowhere' is no folder"):
        average.main([str(checkpoint(run, 4)), "nowhere", "--output_dir", str(tmp_path / "avg")])
    with pytest.raises(OutputDirError, match=r"avg lies in an input of lineage average \(INPUT '.*model': "):
        average.main([str(checkpoint(run, 4)), str(run / "model"), "--output_dir", str(run / "model" / "avg")])
    lone = tmp_path / "lone" / "checkpoints" / "step-00000004"
    shutil.copytree(checkpoint(run, 4), lone)
    with pytest.raises(AveragingError, match="holds no published model"):
        average.main([str(lone), str(checkpoint(run, 2)), "--output_dir", str(tmp_path / "avg")])
    assert not (tmp_path / "avg").exists() and not (run / "model" / "avg").exists()


@pytest.mark.parametrize(("keys", "named"), [
    ({"average_last_checkpoints": 1}, "is 1, the last checkpoint alone"),
    ({"average_last_checkpoints": 3, "save_steps": 2, "save_total_limit": 2}, "'save_total_limit' keeps 2"),
    ({"average_last_checkpoints": 2, "save_steps": 0}, "'save_steps' is 0"),
    ({"average_last_checkpoints": -1}, "average_last_checkpoints"),
])
def test_average_last_checkpoints_that_cannot_act_is_refused(keys, named):
    with pytest.raises(RecipeError, match=named):
        recipe_from_dict(keys)
