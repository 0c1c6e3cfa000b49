"""`lineage convert` (train.convert): a reference checkpoint to Lineage and back, with the tokenizer and the parity
figure in the card; refusals leave nothing behind."""

import json

import pytest
import torch
import transformers
from conftest import preset, run_clean_process
from reference_checkpoints import put_in_hub_cache, save_reference
from safetensors.torch import load_file, save_file

import modeling
from train import convert
from train.run.run_folder import OutputDirError
from train.setup import models


def test_a_reference_checkpoint_converts_to_lineage_and_back(tmp_path, capsys):
    original = save_reference(tmp_path / "bert", "BertForPreTraining")
    lineage = convert.main([str(original), str(tmp_path / "lineage"), "--to", "lineage"])
    printed = capsys.readouterr().out
    assert "BertForPreTraining) ->" in printed and "(LineageBertForPreTraining): largest output difference" in printed
    assert json.loads((lineage / "config.json").read_text())["model_type"] == "lineage-bert"
    card = (lineage / "README.md").read_text()
    assert "Parity: on 8 tokens in fp32 the largest difference" in card and "a `BertForPreTraining`" in card
    assert "Converted from the local folder `bert`, a" in card and str(tmp_path) not in card  # a card to publish
    assert (transformers.AutoTokenizer.from_pretrained(lineage).get_vocab()
            == transformers.AutoTokenizer.from_pretrained(original).get_vocab())
    back = convert.main([str(lineage), str(tmp_path / "back"), "--to", "transformers"])
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    with torch.no_grad():
        before = transformers.BertForPreTraining.from_pretrained(original).eval()(input_ids=ids).prediction_logits
        after = transformers.BertForPreTraining.from_pretrained(back).eval()(input_ids=ids).prediction_logits
    torch.testing.assert_close(after, before, rtol=0, atol=1e-6)
    code = f"""
import transformers
model = transformers.AutoModelForPreTraining.from_pretrained({str(lineage)!r}, trust_remote_code=True)
print(type(model).__name__)
"""
    assert "LineageBertForPreTraining" in run_clean_process(code, tmp_path)


def test_a_hub_id_from_the_cache_converts_and_the_card_names_the_revision(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "cache"
    snapshot = put_in_hub_cache(save_reference(tmp_path / "gpt2", "GPT2LMHeadModel"), cache, "someone/gpt2-tiny")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # the cache folder, read by snapshot_download
    out = convert.main(["someone/gpt2-tiny", str(tmp_path / "out"), "--to", "lineage"])
    card = (out / "README.md").read_text()
    assert card.startswith("---\nbase_model: someone/gpt2-tiny\n---") and f"(revision {snapshot.name})" in card


def test_refusals_leave_nothing_behind(tmp_path):
    original = save_reference(tmp_path / "gpt2", "GPT2LMHeadModel")
    with pytest.raises(models.ModelSourceError, match="is already a transformers GPT2LMHeadModel; use --to lineage"):
        convert.main([str(original), str(tmp_path / "a"), "--to", "transformers"])
    with pytest.raises(models.ModelSourceError, match="is a preset, which has no weights to convert"):
        convert.main(["gpt-tiny", str(tmp_path / "a"), "--to", "lineage"])
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(OutputDirError, match="DST .*full is not empty and holds x, which convert did not write"):
        convert.main([str(original), str(tmp_path / "full"), "--to", "lineage"])
    weights = load_file(original / "model.safetensors")
    weights["transformer.wte.weight"][3, 0] = float("inf")
    save_file(weights, original / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(models.ConversionCheckError, match="differs from the reference GPT2LMHeadModel"):
        convert.main([str(original), str(tmp_path / "a"), "--to", "lineage"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "gpt2"]


def test_the_output_lies_outside_the_source_even_when_it_may_be_replaced(tmp_path):
    """A folder convert wrote may be replaced (`--overwrite_output_dir`), but not by converting it into itself: the
    source would be lost. A folder inside the source is refused too."""
    original = save_reference(tmp_path / "gpt2", "GPT2LMHeadModel")
    lineage = convert.main([str(original), str(tmp_path / "lineage"), "--to", "lineage"])
    before = {p.name: p.read_bytes() for p in lineage.iterdir() if p.is_file()}
    for dst in (lineage, lineage / "inside"):
        with pytest.raises(OutputDirError, match=r"DST .* (is|lies in) an input of lineage convert \(SRC: "):
            convert.main([str(lineage), str(dst), "--to", "transformers", "--overwrite_output_dir"])
    assert {p.name: p.read_bytes() for p in lineage.iterdir() if p.is_file()} == before


GPT_NEEDS = {"intermediate_size": 128, "hidden_act": "gelu_new"}  # OpenAIGPT's, at the tiny preset's hidden_size 32


@pytest.mark.parametrize(("name", "model_class", "overrides", "named", "needs"), [
    ("gpt-tiny", "LineageGptForCausalLM", {}, ["`intermediate_size`=37 (OpenAIGPT: 128)"], GPT_NEEDS),
    ("gpt-tiny", "LineageGptForCausalLM", {"hidden_act": "gelu"}, [
        "`intermediate_size`=37 (OpenAIGPT: 128)", "`hidden_act`='gelu' (OpenAIGPT: one of ['gelu_new', 'relu',"],
     GPT_NEEDS),
    ("transformer-tiny", "LineageTransformerForConditionalGeneration", {},
     ["`sinusoidal_layout`='interleaved' (Marian: 'split')"], {"sinusoidal_layout": "split"}),
])
def test_a_model_the_reference_cannot_express_is_refused_from_its_config_naming_each_field(
        tmp_path, monkeypatch, name, model_class, overrides, named, needs):
    """The tiny presets' GPT (feed-forward 37 wide; OpenAIGPT's is 4 x hidden_size) and Transformer (the paper's
    interleaved sinusoids; Marian's are split) are refused before their weights load, every field with the value the
    reference needs; the same preset with those values converts."""
    source = tmp_path / "model"
    getattr(modeling, model_class)(preset(name, **overrides)).save_pretrained(source)
    with monkeypatch.context() as patched:
        patched.setattr(models, "load_model", lambda *a, **k: pytest.fail("the weights were loaded"))
        with pytest.raises(models.ModelSourceError, match="has no transformers equivalent") as refused:
            convert.main([str(source), str(tmp_path / "out"), "--to", "transformers"])
    assert all(field in str(refused.value) for field in named), refused.value
    assert "model_overrides" in str(refused.value) and not (tmp_path / "out").exists()
    getattr(modeling, model_class)(preset(name, **needs)).save_pretrained(tmp_path / "fixed")
    assert convert.main([str(tmp_path / "fixed"), str(tmp_path / "out"), "--to", "transformers"]).is_dir()


def test_a_model_without_a_reference_class_is_refused_before_its_weights_load(tmp_path, monkeypatch):
    modeling.LineageRnnForConditionalGeneration(preset("rnn-tiny")).save_pretrained(tmp_path / "rnn")
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the weights were loaded"))
    with pytest.raises(models.ModelSourceError, match=r"No conversion for LineageRnnForConditionalGeneration; "
                                                      r"supported classes: .*Nothing was loaded or written"):
        convert.main([str(tmp_path / "rnn"), str(tmp_path / "out"), "--to", "transformers"])
