"""`--model` from every kind of source (train.setup.models): each supported transformers reference class from a folder,
a reference checkpoint and a pushed Lineage model from an offline Hugging Face cache, each trained for a few steps
through its command and loaded back in a clean process; the checkpoint's tokenizer and its added rows; bad inputs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from conftest import REPO, preset, run_clean_process
from reference_checkpoints import TEXTS, put_in_hub_cache, save_reference
from safetensors.torch import load_file, save_file

import modeling
from train import evaluate, finetune, pretrain_bert, pretrain_gpt, train_translation
from train.data.tokenization import config_kwargs_from_tokenizer, train_tokenizer
from train.run.publish import read_card_metadata
from train.run.recipes import RecipeError, parse_args
from train.setup import models, run_tokenizer

QUICK = ["--max_steps", "2", "--train_size", "16", "--eval_size", "8", "--per_device_train_batch_size", "8",
         "--per_device_eval_batch_size", "8", "--max_seq_length", "32", "--report_to", "none", "--progress_bar",
         "false", "--save_steps", "0", "--logging_steps", "1"]

# reference class, command, its extra arguments, the Auto class the saved model loads with
RUNS = {
    "BertForPreTraining": (finetune, ["--task", "sequence-classification", "--dataset", "embedded:sentiment"],
                           "AutoModelForSequenceClassification"),
    "BertForSequenceClassification": (finetune, ["--task", "nli", "--dataset", "embedded:nli"],
                                      "AutoModelForSequenceClassification"),
    "BertForMaskedLM": (pretrain_bert, ["--nsp", "false", "--dataset", "embedded:documents"], "AutoModelForMaskedLM"),
    "GPT2LMHeadModel": (finetune, ["--task", "nli", "--dataset", "embedded:nli"], "AutoModelForSequenceClassification"),
    "OpenAIGPTLMHeadModel": (finetune, ["--task", "sequence-classification", "--dataset", "embedded:sentiment"],
                             "AutoModelForSequenceClassification"),
    "GPT2ForSequenceClassification": (pretrain_gpt, ["--dataset", "embedded:documents", "--pack_documents", "false"],
                                      "AutoModelForCausalLM"),
    "BertModel": (finetune, ["--task", "token-classification", "--dataset", "embedded:ner"],
                  "AutoModelForTokenClassification"),
    "MarianMTModel": (train_translation, ["--dataset", "embedded:translation", "--num_beams", "1",
                                          "--max_new_tokens", "8", "--label_smoothing", "0.1"],
                      "AutoModelForSeq2SeqLM"),
}


def clean_logits(folder: Path, auto: str, text: str, cwd: Path) -> list[float]:
    """The first logits row of the saved model on `text`, computed where Lineage cannot be imported."""
    code = f"""
import json, torch, transformers
model = transformers.{auto}.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
tokenizer = transformers.AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)
assert model.config.vocab_size == len(tokenizer), (model.config.vocab_size, len(tokenizer))
inputs = tokenizer({text!r}, return_tensors="pt")
extra = {{"decoder_input_ids": inputs["input_ids"][:, :2]}} if model.config.is_encoder_decoder else {{}}
with torch.no_grad():
    logits = model(**inputs, **extra).logits
print("LOGITS", json.dumps(logits.reshape(-1)[:16].tolist()))
"""
    out = run_clean_process(code, cwd)
    return json.loads(out.split("LOGITS ")[1].splitlines()[0])


def local_logits(folder: Path, auto: str, text: str) -> list[float]:
    model = getattr(transformers, auto).from_pretrained(folder).eval()
    inputs = transformers.AutoTokenizer.from_pretrained(folder)(text, return_tensors="pt")
    extra = {"decoder_input_ids": inputs["input_ids"][:, :2]} if model.config.is_encoder_decoder else {}
    with torch.no_grad():
        return model(**inputs, **extra).logits.reshape(-1)[:16].tolist()


@pytest.mark.parametrize("reference", list(RUNS))
def test_a_reference_checkpoint_in_a_folder_trains_through_its_command(tmp_path, reference):
    folder = save_reference(tmp_path / "checkpoint", reference)
    command, extra, auto = RUNS[reference]
    out = tmp_path / "run"
    results, saved = command.main(["--model", str(folder), "--output_dir", str(out), *QUICK, *extra])
    assert results["steps"] == 2 and results["converted_from"] == reference
    assert results["conversion_max_abs_diff"] <= models.CONVERSION_TOLERANCE
    config = json.loads((saved / "config.json").read_text())
    assert config["model_type"].startswith("lineage-")
    card = (saved / "README.md").read_text()
    assert f"a transformers `{reference}` converted to Lineage" in card and "before training" in card
    text = "the cat sat on the mat"
    assert clean_logits(saved, auto, text, tmp_path) == pytest.approx(local_logits(saved, auto, text), abs=1e-5)


@pytest.mark.parametrize("reference", sorted(models.REFERENCE_CLASSES))
def test_every_supported_reference_class_converts_on_load_within_the_tolerance(tmp_path, reference):
    source = models.resolve_model(str(save_reference(tmp_path / reference, reference)))
    model = models.load_model(source)
    assert source.kind == "reference" and type(model).__name__.startswith("Lineage")
    assert 0 <= source.report["conversion_max_abs_diff"] <= models.CONVERSION_TOLERANCE


def test_the_checkpoints_own_tokenizer_gets_lineages_tokens_and_mean_rows(tmp_path):
    folder = save_reference(tmp_path / "gpt2", "GPT2LMHeadModel")
    reference = transformers.GPT2LMHeadModel.from_pretrained(folder)
    source = models.resolve_model(str(folder))
    tokenizer = run_tokenizer.pretrained_tokenizer(source)
    old = reference.config.vocab_size
    assert len(tokenizer) == old + 4 and tokenizer.pad_token == "[PAD]"
    ids = tokenizer("a cat", "a dog")["input_ids"]
    assert tokenizer.convert_ids_to_tokens([ids[0], ids[-1]]) == ["[START]", "[EXTRACT]"]
    assert "[DELIM]" in tokenizer.convert_ids_to_tokens(ids)
    model = models.load_model(source, "AutoModelForSequenceClassification")
    report = models.fit_embeddings(model, tokenizer)
    rows = model.get_input_embeddings().weight
    assert report == {"added_embedding_rows": 4} and model.config.vocab_size == len(tokenizer) == rows.shape[0]
    torch.testing.assert_close(rows[:old], reference.transformer.wte.weight, rtol=0, atol=0)
    torch.testing.assert_close(rows[old:], reference.transformer.wte.weight.mean(0).expand(4, -1))
    assert model.config.pad_token_id == tokenizer.pad_token_id
    # causal-LM training adds only the pad token; BERT's tokenizer already has everything
    assert len(run_tokenizer.pretrained_tokenizer(source, templates=False)) == old + 1
    bert = models.resolve_model(str(save_reference(tmp_path / "bert", "BertForMaskedLM")))
    bert_tokenizer = run_tokenizer.pretrained_tokenizer(bert)
    assert len(bert_tokenizer) == bert.config.vocab_size
    pair = bert_tokenizer("a cat", "a dog")
    assert pair["token_type_ids"][-1] == 1 and bert_tokenizer.convert_ids_to_tokens(pair["input_ids"][0]) == "[CLS]"
    # Marian: the logits bias grows with the vocabulary, its new entries the mean of the old
    marian = models.resolve_model(str(save_reference(tmp_path / "marian", "MarianMTModel")))
    marian_tokenizer = run_tokenizer.pretrained_tokenizer(marian)
    model = models.load_model(marian, "AutoModelForSeq2SeqLM")
    model.final_logits_bias.normal_()
    before = model.final_logits_bias.clone()  # (1, V)
    marian_tokenizer.add_tokens(["<new-1>", "<new-2>"])
    assert models.fit_embeddings(model, marian_tokenizer) == {"added_embedding_rows": 2}
    assert model.final_logits_bias.shape == (1, len(marian_tokenizer))
    torch.testing.assert_close(model.final_logits_bias[0, -2:], before.mean().expand(2))
    ids = torch.tensor([[len(marian_tokenizer) - 1, 5, 2]])
    assert model(input_ids=ids, decoder_input_ids=ids).logits.shape[-1] == len(marian_tokenizer)


def test_a_bert_tokenizer_given_segments_for_training_saves_them(tmp_path):
    """A BERT checkpoint whose tokenizer's class does not list token_type_ids trains with segments 0 / 1: the tokenizer
    saved with the trained model gives them too (they were set as an attribute, which transformers 5 does not save)."""
    folder = save_reference(tmp_path / "bert", "BertForPreTraining")
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "tokenizer_class": "PreTrainedTokenizerFast"}))  # no segments
    assert "token_type_ids" not in transformers.AutoTokenizer.from_pretrained(folder)("a cat", "a dog")
    run_tokenizer.pretrained_tokenizer(models.resolve_model(str(folder))).save_pretrained(tmp_path / "saved")
    saved = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert saved.model_input_names == ["input_ids", "attention_mask", "token_type_ids"]
    pair = saved("a cat", "a dog")
    assert pair["token_type_ids"][0] == 0 and pair["token_type_ids"][-1] == 1


def test_a_checkpoints_tokenizer_grows_the_embeddings_for_its_added_tokens_only(tmp_path):
    """More tokens than embedding rows: tokens added to the tokenizer (`add_tokens`) get rows; a vocabulary larger than
    the rows is another model's tokenizer, refused naming the argument before anything is written (it was grown)."""
    words = train_tokenizer("bert", TEXTS, 80, min_frequency=1, model_max_length=64)
    rows = len(words)
    fits, short = tmp_path / "fits", tmp_path / "short"
    for folder, size in ((fits, rows), (short, rows - 10)):
        config = preset("bert-tiny", **{**config_kwargs_from_tokenizer(words, "bert"), "vocab_size": size})
        modeling.LineageBertForMaskedLM(config).save_pretrained(folder)
    words.save_pretrained(short)
    words.add_tokens(["<x>", "<y>"])
    words.save_pretrained(fits)
    source = models.resolve_model(str(fits))
    tokenizer = run_tokenizer.pretrained_tokenizer(source)
    model = models.load_model(source, "AutoModelForSequenceClassification")
    assert models.fit_embeddings(model, tokenizer) == {"added_embedding_rows": 2} and len(tokenizer) == rows + 2
    with pytest.raises(models.ModelSourceError) as refused:
        finetune.main(["--model", str(short), "--task", "nli", "--output_dir", str(tmp_path / "o"), *QUICK])
    assert str(refused.value) == (
        f"--model {str(short)!r}: the tokenizer saved with it does not fit the model: its vocabulary holds {rows} "
        f"tokens, not counting those added to it, for {rows - 10} embedding rows (vocab_size); it is not the "
        "tokenizer the model was trained with: save that one in the folder")
    assert not (tmp_path / "o").exists()


def run_command(module: str, args: list[str], cache: Path, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m module args` with the Hugging Face cache at `cache` and the network off."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "hf-home"),
           "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_pull_after_push_a_lineage_model_from_the_hub_cache_trains_further(tmp_path):
    """A run's folder, as `push_to_hub` uploads it, is read back by its repo id from an offline cache (written in
    the layout huggingface_hub reads; nothing in the loading path is replaced) and fine-tuned further."""
    first = tmp_path / "first"
    finetune.main(["--model", str(save_reference(tmp_path / "bert", "BertForPreTraining")), "--output_dir", str(first),
                   "--task", "sequence-classification", "--dataset", "embedded:sentiment", *QUICK])
    cache = tmp_path / "cache"
    snapshot = put_in_hub_cache(first / "model", cache, "someone/bert-sentiment")
    second = tmp_path / "second"
    done = run_command("train.finetune", ["--recipe", "bert-finetune-nli-tiny", "--model", "someone/bert-sentiment",
                                          "--output_dir", str(second),
                                          "--task", "sequence-classification", "--dataset", "embedded:sentiment",
                                          *QUICK], cache, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "backbone weights missing" not in done.stderr
    results = json.loads((second / "model" / "results.json").read_text())
    assert results["base_model"] == "someone/bert-sentiment" and results["base_model_revision"] == snapshot.name
    assert read_card_metadata(second / "model" / "README.md")["base_model"] == "someone/bert-sentiment"
    assert f"`someone/bert-sentiment` (revision {snapshot.name})" in (second / "model" / "README.md").read_text()
    text = "what a dull film"
    auto = "AutoModelForSequenceClassification"
    assert clean_logits(second / "model", auto, text, tmp_path) == pytest.approx(
        local_logits(second / "model", auto, text), abs=1e-5)


def test_a_reference_checkpoint_from_the_hub_cache_continues_pretraining(tmp_path):
    cache = tmp_path / "cache"
    snapshot = put_in_hub_cache(save_reference(tmp_path / "gpt2", "GPT2LMHeadModel"), cache, "openai-community/gpt2-t")
    out = tmp_path / "run"
    done = run_command("train.pretrain_gpt", ["--recipe", "gpt-pretrain-tiny", "--model", "openai-community/gpt2-t",
                                              "--model_revision", "main",
                                              "--output_dir", str(out), "--dataset", "embedded:documents",
                                              "--pack_documents", "false", "--max_new_tokens", "4", *QUICK],
                       cache, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "outputs within" in done.stdout and "limit 0.0001" in done.stdout
    results = json.loads((out / "model" / "results.json").read_text())
    assert results["converted_from"] == "GPT2LMHeadModel" and results["base_model_revision"] == snapshot.name
    tokenizer = transformers.AutoTokenizer.from_pretrained(out / "model")
    assert type(tokenizer).__name__ == "GPT2Tokenizer" and tokenizer.pad_token == "[PAD]"


# ----------------------------------------------------------------------------------------------------------
# Bad input: a clear error naming the argument, before any training step (output_dir never created)
# ----------------------------------------------------------------------------------------------------------


def test_an_unsupported_architecture_is_refused_listing_the_supported_classes(tmp_path):
    config = transformers.RobertaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                        intermediate_size=37)
    transformers.RobertaForMaskedLM(config).save_pretrained(tmp_path / "roberta")
    with pytest.raises(models.UnsupportedCheckpointError,
                       match=r"recipe key 'model' .*RobertaForMaskedLM \(model_type 'roberta'\).*BertForMaskedLM.*"
                             r"GPT2LMHeadModel.*MarianMTModel.*OpenAIGPTLMHeadModel"):
        finetune.main(["--model", str(tmp_path / "roberta"), "--output_dir", str(tmp_path / "out"), *QUICK])
    assert not (tmp_path / "out").exists()


def test_an_uncached_hub_id_offline_names_the_id_and_the_variable(tmp_path):
    with pytest.raises(models.ModelSourceError, match=r"'nobody/not-cached' is no local folder, and as a Hub repo id "
                                                       r"it is not in the Hugging Face cache .* "
                                                       r"HF_HUB_OFFLINE=1 forbids downloading it"):
        finetune.main(["--model", "nobody/not-cached", "--output_dir", str(tmp_path / "out"), *QUICK])
    assert not (tmp_path / "out").exists()


def test_a_task_the_family_has_no_head_for_is_refused(tmp_path):
    gpt = save_reference(tmp_path / "gpt2", "GPT2LMHeadModel")
    with pytest.raises(RecipeError, match="recipe key 'task': 'token-classification' needs a BERT model"):
        finetune.main(["--model", str(gpt), "--task", "token-classification", "--output_dir", str(tmp_path / "o")])
    marian = save_reference(tmp_path / "marian", "MarianMTModel")
    with pytest.raises(RecipeError, match="recipe key 'model': finetune trains bert or gpt models; .* is a "
                                          "lineage-transformer model"):
        finetune.main(["--model", str(marian), "--task", "nli", "--output_dir", str(tmp_path / "o")])
    with pytest.raises(RecipeError, match="recipe key 'model': pretrain_bert trains bert models"):
        pretrain_bert.main(["--model", str(gpt), "--output_dir", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_a_tokenizer_of_another_vocabulary_is_refused(tmp_path):
    bert = save_reference(tmp_path / "bert", "BertForPreTraining")
    gpt = save_reference(tmp_path / "gpt2", "GPT2LMHeadModel")
    with pytest.raises(RecipeError, match=r"recipe key 'tokenizer': .*gpt2' does not match the vocabulary of --model"):
        finetune.main(["--model", str(bert), "--tokenizer", str(gpt), "--task", "nli",
                       "--output_dir", str(tmp_path / "o"), *QUICK])
    assert not (tmp_path / "o").exists()


def test_a_tokenizer_training_key_or_an_oversized_tokenizer_with_a_pretrained_model_is_refused(tmp_path):
    """tokenizer_vocab_size and tokenizer_train_size size a tokenizer the run trains: with a pretrained model, whose
    own tokenizer is used, they were ignored. A --tokenizer for a checkpoint without one must fit its embedding."""
    bert = save_reference(tmp_path / "bert", "BertForSequenceClassification")
    for keys, named in ((["--tokenizer_vocab_size", "300"], "key 'tokenizer_vocab_size' sizes"),
                        (["--tokenizer_train_size", "9", "--tokenizer_vocab_size", "300"],
                         "keys 'tokenizer_vocab_size' and 'tokenizer_train_size' size")):
        with pytest.raises(RecipeError) as refused:
            finetune.main(["--model", str(bert), "--task", "nli", "--output_dir", str(tmp_path / "o"), *keys, *QUICK])
        assert str(refused.value) == (
            f"recipe {named} the tokenizer a run trains; recipe key 'model' {str(bert)!r} is a pretrained model, "
            "trained with its own tokenizer or recipe key 'tokenizer' (never a freshly trained vocabulary): drop "
            f"{'it' if len(keys) == 2 else 'them'}")
    bare = tmp_path / "bare"  # the weights without tokenizer files
    transformers.BertForSequenceClassification.from_pretrained(bert).save_pretrained(bare)
    gpt = save_reference(tmp_path / "gpt2", "GPT2LMHeadModel")
    rows, tokens = (transformers.AutoConfig.from_pretrained(bert).vocab_size,
                    transformers.AutoTokenizer.from_pretrained(gpt).vocab_size)
    with pytest.raises(RecipeError, match=rf"recipe key 'tokenizer': {str(gpt)!r} does not match the vocabulary of "
                                          rf"--model {str(bare)!r}: its vocabulary holds {tokens} tokens, not counting "
                                          rf"those added to it, for {rows} embedding rows \(vocab_size\); it is not "
                                          "this checkpoint's"):
        finetune.main(["--model", str(bare), "--tokenizer", str(gpt), "--task", "nli", "--output_dir",
                       str(tmp_path / "o"), *QUICK])
    assert not (tmp_path / "o").exists()


def test_a_key_models_of_another_type_do_not_read_is_refused_where_the_user_set_it(tmp_path):
    """BERT's fine-tuning has no auxiliary LM loss: a user's lm_loss_weight was ignored while its recipe.yaml recorded
    it; the GPT recipe's own, fine-tuning BERT, is no user's and stays."""
    with pytest.raises(RecipeError) as refused:
        finetune.main(["--recipe", "bert-finetune-nli-tiny", "--lm_loss_weight", "0.2", "--output_dir",
                       str(tmp_path / "o")])
    assert str(refused.value) == ("recipe key 'lm_loss_weight' is read for lineage-gpt models only; recipe key 'model' "
                                  "'bert-tiny' is a lineage-bert model, which would ignore it while its recipe.yaml "
                                  "showed it as used: drop it")
    assert not (tmp_path / "o").exists()
    shipped = parse_args(["--recipe", "gpt-finetune-nli-tiny", "--model", "bert-tiny"], command="finetune")
    assert models.model_source(shipped, "finetune", ("bert", "gpt")).family == "bert"
    gpt = parse_args(["--recipe", "gpt-finetune-nli-tiny", "--lm_loss_weight", "0.2"], command="finetune")
    assert models.model_source(gpt, "finetune", ("bert", "gpt")).family == "gpt"


def test_a_lineage_model_type_this_installation_does_not_know_names_the_version(tmp_path):
    folder = tmp_path / "future"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "lineage-mamba", "architectures": ["X"]}))
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(RecipeError, match=r"'lineage-mamba' model, which this installation of Lineage \(\d+\.\d+"):
        finetune.main(["--model", str(folder), "--output_dir", str(tmp_path / "o")])


def test_a_failed_conversion_check_writes_nothing(tmp_path):
    """A checkpoint whose weights hold a NaN (a damaged file) loads in transformers, converts, and fails the check."""
    folder = save_reference(tmp_path / "gpt2", "GPT2LMHeadModel")
    weights = load_file(folder / "model.safetensors")
    weights["transformer.h.0.mlp.c_fc.weight"][0, 0] = float("nan")
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "out"
    with pytest.raises(models.ConversionCheckError, match=r"differs from the reference GPT2LMHeadModel by nan .*the "
                                                            r"limit is 0.0001\): the outputs are not finite"):
        pretrain_gpt.main(["--model", str(folder), "--output_dir", str(out), *QUICK])
    assert not out.exists()


def test_presets_hub_ids_and_paths_are_told_apart(tmp_path):
    assert models.resolve_model("bert-tiny").kind == "preset"
    with pytest.raises(RecipeError, match=r"'bert-huge' is neither a preset \(bert-base.*\), a config.json file, a "
                                          r"model folder nor a Hub repo id"):
        models.resolve_model("bert-huge")
    with pytest.raises(RecipeError, match="is neither a preset"):
        models.resolve_model(str(tmp_path / "missing" / "model"))
    with pytest.raises(RecipeError, match="recipe key 'model_revision' \\('v1'\\) selects a version of a Hub repo"):
        models.resolve_model("bert-tiny", "v1")
    assert models.HUB_ID.fullmatch("google-bert/bert-base-uncased") and not models.HUB_ID.fullmatch("a/b/c")
    lineage = tmp_path / "lineage"
    modeling.LineageBertForMaskedLM(models.resolve_model("bert-tiny").config).save_pretrained(lineage)
    assert models.resolve_model(str(lineage)).kind == "lineage"
    (tmp_path / "lineage-run").mkdir()
    lineage = lineage.rename(tmp_path / "lineage-run" / "model")
    with pytest.raises(RecipeError, match=r"has no config.json \(a run saves its model in .*lineage-run/model\)"):
        models.resolve_model(str(tmp_path / "lineage-run"))
    checkpoint = tmp_path / "lineage-run" / "checkpoints" / "step-00000002"
    checkpoint.mkdir(parents=True)
    (checkpoint / "lineage_state.json").write_text("{}")
    with pytest.raises(RecipeError, match=r"has no config.json \(a run's checkpoint: the weights and training state "
                                          r"of one step, without the model's config; its run's model is "
                                          r".*lineage-run/model, and lineage average makes a model folder"):
        models.resolve_model(str(checkpoint))  # (before: 'it has no config.json' alone)
    with pytest.raises(evaluate.EvaluateError, match=r"no config.json \(a run's checkpoint: .* its run's model is "):
        evaluate.main(["--model", str(checkpoint), "--output_dir", str(tmp_path / "e")])
    with pytest.raises(RecipeError, match="no tokenizer files .* give the checkpoint's tokenizer with --tokenizer"):
        finetune.main(["--model", str(lineage), "--output_dir", str(tmp_path / "o"), *QUICK])
    assert not (tmp_path / "o").exists()


def test_attention_maps_and_benchmark_take_a_hub_revision(tmp_path, monkeypatch, capsys):
    """`--model_revision` of the commands without a recipe: a Hub id's revision from the offline cache; with a local
    folder it is refused naming `--model_revision`."""
    from huggingface_hub import constants

    from train import benchmark
    from train.analysis import attention

    cache = tmp_path / "cache"
    local = save_reference(tmp_path / "gpt2", "GPT2LMHeadModel")
    put_in_hub_cache(local, cache, "someone/gpt2-tiny")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    model = attention.load_attention_model("someone/gpt2-tiny", "main")
    assert type(model).__name__ == "LineageGptForCausalLM"
    assert attention.load_attention_tokenizer("someone/gpt2-tiny", "main").vocab_size > 0
    args = benchmark.parse_args(["--model", "someone/gpt2-tiny", "--model_revision", "main", "--task", "causal-lm",
                                 "--seq_length", "8"])
    assert args.config.model_type == "lineage-gpt" and args.config.vocab_size == model.config.vocab_size
    with pytest.raises(attention.AttentionInputError, match=r"--model_revision \('main'\) selects a version of a Hub "
                                                            r"repo; --model .* is a local file, folder or preset"):
        attention.load_attention_model(str(local), "main")
    with pytest.raises(SystemExit):
        benchmark.parse_args(["--model", "gpt-tiny", "--model_revision", "main", "--task", "causal-lm"])
    assert "--model_revision ('main') selects a version of a Hub repo; --model 'gpt-tiny'" in capsys.readouterr().err


def test_a_masked_lm_checkpoint_holding_bert_pretraining_weights_keeps_its_trained_pooler(tmp_path):
    """As the published bert-base-uncased: BertForPreTraining's weights (the pooler and NSP head too) under the
    architecture BertForMaskedLM, whose class has no pooler; the classification heads start from the trained one."""
    folder = save_reference(tmp_path / "bert", "BertForPreTraining")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMaskedLM"]}))
    pooler = load_file(folder / "model.safetensors")["bert.pooler.dense.weight"]
    source = models.resolve_model(str(folder))
    model = models.load_model(source, "AutoModelForSequenceClassification")
    assert torch.equal(model.bert.pooler.dense.weight, pooler)
    assert source.report["conversion_max_abs_diff"] <= models.CONVERSION_TOLERANCE
