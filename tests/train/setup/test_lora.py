"""PEFT LoRA on every family: default target modules from `import modeling`, training changes only the adapter,
the adapter saves and reloads, `merge_and_unload` gives the adapted model's logits; `finetune` with a `lora` recipe."""

import json
import warnings

import pytest
import torch
from conftest import preset

peft = pytest.importorskip("peft")

from modeling import (  # noqa: E402
    LORA_TARGET_MODULES,
    LineageBertForSequenceClassification,
    LineageGptForCausalLM,
    LineageTransformerForConditionalGeneration,
)

FAMILIES = {
    "bert": (LineageBertForSequenceClassification, "bert-tiny"),
    "gpt": (LineageGptForCausalLM, "gpt-tiny"),
    "transformer": (LineageTransformerForConditionalGeneration, "transformer-tiny"),
}


def inputs(family: str) -> dict:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 99, (2, 7), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    batch = {"input_ids": ids, "attention_mask": mask}
    if family == "transformer":
        batch["decoder_input_ids"] = torch.randint(5, 99, (2, 4), generator=generator)
    return batch


def labels(family: str, batch: dict) -> torch.Tensor:
    if family == "bert":
        return torch.tensor([0, 1])
    return batch["decoder_input_ids"] if family == "transformer" else batch["input_ids"]


def base_model(family: str):
    model_class, name = FAMILIES[family]
    torch.manual_seed(0)
    return model_class(preset(name, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def adapted(family: str):
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False)  # B != 0: not a no-op
    return peft.get_peft_model(base_model(family), config)


@pytest.mark.parametrize("family", FAMILIES)
def test_default_targets_are_every_projection(family):
    model = adapted(family)
    targets = model.peft_config["default"].target_modules
    assert targets == set(LORA_TARGET_MODULES)
    wrapped = {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
               if isinstance(module, peft.tuners.lora.Linear)}
    assert wrapped == {"q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"}  # no gated FFN in the presets


@pytest.mark.parametrize("family", FAMILIES)
def test_training_changes_only_the_adapter(family):
    model = peft.get_peft_model(base_model(family), peft.LoraConfig(r=4, lora_alpha=8))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    batch = inputs(family)
    for _ in range(3):
        model(**batch, labels=labels(family, batch)).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed == trainable  # lora_A moves once lora_B has left zero


@pytest.mark.parametrize("family", FAMILIES)
def test_adapter_saves_reloads_and_merges(family, tmp_path):
    model = adapted(family).eval()
    batch = inputs(family)
    with torch.no_grad():
        expected = model(**batch).logits
        with model.disable_adapter():
            assert not torch.allclose(expected, model(**batch).logits, atol=1e-3)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "adapter_config.json").read_text())["r"] == 4
    reloaded = peft.PeftModel.from_pretrained(base_model(family), tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**batch).logits, expected, atol=0, rtol=0)
    merged = reloaded.merge_and_unload()
    assert type(merged) is FAMILIES[family][0]
    assert not any("lora_" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(merged(**batch).logits, expected, atol=1e-5, rtol=1e-5)


def test_finetune_with_a_lora_recipe_saves_the_adapter_and_the_merged_model(tmp_path):
    from transformers import AutoModelForSequenceClassification

    from train import finetune

    out = tmp_path / "run"
    with warnings.catch_warnings(record=True) as caught:  # a normal run warns of nothing (docs/reliability.md)
        warnings.simplefilter("always")
        results, folder = finetune.main([
            "--recipe", "bert-finetune-nli-tiny", "--output_dir", str(out), "--progress_bar", "false",
            "--max_steps", "3", "--save_steps", "0", "--train_size", "48", "--eval_size", "16",
            "--lora", "{r: 4, alpha: 8, dropout: 0.1}"])
    assert [str(w.message) for w in caught] == []
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"], adapter["lora_dropout"]) == (4, 8, 0.1)
    assert set(adapter["target_modules"]) == set(LORA_TARGET_MODULES) and adapter["modules_to_save"] == ["classifier"]
    merged = AutoModelForSequenceClassification.from_pretrained(folder)
    assert type(merged) is LineageBertForSequenceClassification and "eval_accuracy" in results
    assert not any("lora_" in name for name in merged.state_dict())
    base = AutoModelForSequenceClassification.from_pretrained(folder)
    reloaded = peft.PeftModel.from_pretrained(base, out / "adapter")
    assert {name for name, _ in reloaded.named_parameters() if "lora_" in name}


def test_a_resume_cannot_add_drop_or_change_the_adapter(tmp_path):
    """The checkpoint holds the adapter's weights (or none): another `lora` was reported as a corrupt checkpoint
    (its state did not load) or, for `alpha`, silently resumed another model."""
    from train import finetune
    from train.run.checkpoints import ResumeMismatchError

    argv = ["--recipe", "bert-finetune-nli-tiny", "--output_dir", str(tmp_path / "run"), "--progress_bar", "false",
            "--train_size", "48", "--eval_size", "16", "--save_steps", "1"]
    finetune.main([*argv, "--max_steps", "2", "--lora", "{r: 4}"])
    for lora, now in (([], "None"), (["--lora", "{r: 4, alpha: 32}"], r"\{'r': 4, 'alpha': 32\}"),
                      (["--lora", "{r: 8}"], r"\{'r': 8\}")):
        with pytest.raises(ResumeMismatchError, match=rf"recipe key 'lora' is {now} but the run was started with "
                                                      r"\{'r': 4\}: it shapes the model the checkpoint holds"):
            finetune.main([*argv, "--max_steps", "3", "--resume_from_checkpoint", "latest", *lora])


def test_bad_lora_recipes_are_refused():
    from train.run.recipes import RecipeError, recipe_from_dict

    with pytest.raises(RecipeError, match=r"unknown key\(s\) 'rank' in recipe key 'lora'; valid: r, alpha"):
        recipe_from_dict({"lora": {"rank": 4}})
    with pytest.raises(RecipeError, match=r"'lora.dropout' must be in \[0, 1\), got 1.5"):
        recipe_from_dict({"lora": {"dropout": 1.5}})
    with pytest.raises(RecipeError, match="'lora.r' must be an integer >= 1, got 0"):
        recipe_from_dict({"lora": {"r": 0}})


def test_an_adapter_trained_from_a_transformers_checkpoint_with_added_tokens_loads_on_its_converted_base(tmp_path):
    """GPT-2 gains Lineage's [PAD] [START] [DELIM] [EXTRACT]: the adapter carries the grown embedding and names the
    checkpoint the user gave (it named the conversion's deleted temporary folder and lacked the new rows, so
    `PeftModel.from_pretrained` on the converted base read ids past its embedding)."""
    from reference_checkpoints import save_reference
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from train import convert, finetune

    gpt2 = save_reference(tmp_path / "gpt2", "GPT2LMHeadModel")
    out = tmp_path / "run"
    finetune.main(["--model", str(gpt2), "--task", "sequence-classification", "--dataset", "embedded:sentiment",
                   "--output_dir", str(out), "--lora", "{r: 4}", "--max_steps", "2", "--train_size", "16",
                   "--eval_size", "8", "--max_seq_length", "32", "--progress_bar", "false", "--save_steps", "0"])
    assert json.loads((out / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] == str(gpt2)
    convert.main([str(gpt2), str(tmp_path / "base"), "--to", "lineage"])  # the base, as docs/using.md says
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    merged = AutoModelForSequenceClassification.from_pretrained(out / "model").eval()
    base = AutoModelForSequenceClassification.from_pretrained(tmp_path / "base", num_labels=merged.config.num_labels)
    base.resize_token_embeddings(len(tokenizer))
    adapted = peft.PeftModel.from_pretrained(base, out / "adapter").eval()
    batch = tokenizer(["a cat sat on the mat", "what a dull film"], ["a dog ran", "it was fun"], padding=True,
                      return_tensors="pt")
    assert batch["input_ids"].max() >= 300  # the added tokens: past GPT-2's 300 rows
    with torch.no_grad():
        torch.testing.assert_close(adapted(**batch).logits, merged(**batch).logits, atol=1e-5, rtol=1e-5)
