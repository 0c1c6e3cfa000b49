"""Bad models and what comes with them (a user study): a damaged model folder (a truncated `model.safetensors`, a
`config.json` that is not JSON), a tokenizer file given for its folder, a LoRA target that is no layer of the model or
only its head, a translation pipeline over a model that does not translate, a translation file without the columns
`train_translation` reads, and a Transformer asked to generate past its decoder positions. Each is refused before any
work, naming the argument (or the file) and what is allowed."""

import json

import pytest
import torch
from conftest import preset
from reference_checkpoints import bert_tokenizer, reference_model
from transformers import AutoModelForSeq2SeqLM

import modeling
from train import attention_maps, convert, export, finetune, pretrain_gpt, train_translation
from train.analysis.attention import AttentionInputError
from train.data.errors import MissingColumnError
from train.data.tokenization import (
    EmptyVocabularyError,
    TokenizerPathError,
    config_kwargs_from_tokenizer,
    train_tokenizer,
)
from train.run.recipes import RecipeError
from train.setup.models import ModelSourceError

QUICK = ["--max_steps", "2", "--train_size", "16", "--eval_size", "8", "--per_device_train_batch_size", "8",
         "--per_device_eval_batch_size", "8", "--max_seq_length", "32", "--report_to", "none", "--progress_bar",
         "false", "--save_steps", "0", "--logging_steps", "1"]
TEXTS = ["the cat sat on the mat", "a dog ran in the park", "birds sing in the morning"] * 4


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    """A saved Lineage BERT (masked LM) with its tokenizer."""
    folder = tmp_path_factory.mktemp("bert") / "model"
    tokenizer = train_tokenizer("bert", TEXTS, 60, min_frequency=1, model_max_length=64)
    modeling.LineageBertForMaskedLM(preset("bert-tiny", **config_kwargs_from_tokenizer(tokenizer, "bert"))
                                    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def damaged_copy(folder, tmp_path, name: str, content: bytes):
    """`folder` copied into `tmp_path` with the file `name` replaced by `content`."""
    copy = tmp_path / "damaged"
    copy.mkdir()
    for file in folder.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    (copy / name).write_bytes(content)
    return copy


# ----------------------------------------------------------------------------------------------------------
# A damaged model folder
# ----------------------------------------------------------------------------------------------------------


def finetune_from(folder, tmp_path):
    return finetune.main(["--model", str(folder), "--task", "nli", "--output_dir", str(tmp_path / "out"), *QUICK])


def export_from(folder, tmp_path):
    return export.main(["--model", str(folder), "--output_dir", str(tmp_path / "out")])


COMMANDS = {"finetune": (finetune_from, "recipe key 'model'"), "export": (export_from, "--model")}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", ["truncated", "not safetensors"])
def test_a_damaged_safetensors_file_is_refused_naming_the_file_and_the_argument(bert_folder, tmp_path, command,
                                                                                  damage):
    weights = (bert_folder / "model.safetensors").read_bytes()
    content = weights[: len(weights) // 2] if damage == "truncated" else b"<html>404 Not Found</html>"
    folder = damaged_copy(bert_folder, tmp_path, "model.safetensors", content)
    run, argument = COMMANDS[command]
    with pytest.raises(ModelSourceError) as refused:
        run(folder, tmp_path)
    message = str(refused.value)
    assert message.startswith(f"{argument} {str(folder)!r}: "), message
    assert f"{folder / 'model.safetensors'} is truncated or not a safetensors file" in message
    assert "re-save it" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_config_json_that_is_not_json_names_the_file_the_line_and_the_column(bert_folder, tmp_path, command):
    text = (bert_folder / "config.json").read_text().replace('"hidden_size": 32,', '"hidden_size": 32,,', 1)
    with pytest.raises(json.JSONDecodeError) as parsed:
        json.loads(text)
    folder = damaged_copy(bert_folder, tmp_path, "config.json", text.encode())
    run, argument = COMMANDS[command]
    with pytest.raises(ModelSourceError) as refused:
        run(folder, tmp_path)
    message = str(refused.value)
    where = f"line {parsed.value.lineno}, column {parsed.value.colno}: {parsed.value.msg}"
    assert message.startswith(f"{argument} {str(folder)!r}: {folder / 'config.json'} is not valid JSON ({where})"), \
        message
    assert "re-save it" in message
    assert not (tmp_path / "out").exists()


def test_a_config_json_that_holds_no_mapping_is_refused(bert_folder, tmp_path):
    folder = damaged_copy(bert_folder, tmp_path, "config.json", b"[1, 2]\n")
    with pytest.raises(ModelSourceError, match=r"config.json holds a JSON list, not an object of config fields"):
        export_from(folder, tmp_path)


def test_a_config_json_file_given_as_model_is_read_with_the_same_care(tmp_path):
    config = tmp_path / "my-config.json"
    config.write_text('{"model_type": "lineage-gpt"\n "hidden_size": 32}\n')
    with pytest.raises(ModelSourceError, match=r"^recipe key 'model' '.*my-config.json': .*my-config.json is not valid "
                                               r"JSON \(line 2, column 2: Expecting ',' delimiter\)"):
        pretrain_gpt.main(["--model", str(config), "--output_dir", str(tmp_path / "out"), *QUICK])


# ----------------------------------------------------------------------------------------------------------
# A tokenizer file where a tokenizer folder belongs
# ----------------------------------------------------------------------------------------------------------


def test_a_tokenizer_file_for_a_pretrained_model_is_refused_naming_its_folder(bert_folder, tmp_path):
    file = bert_folder / "tokenizer.json"
    with pytest.raises(TokenizerPathError) as refused:
        finetune.main(["--model", str(bert_folder), "--tokenizer", str(file), "--task", "nli",
                       "--output_dir", str(tmp_path / "out"), *QUICK])
    message = str(refused.value)
    assert message.startswith(f"recipe key 'tokenizer' {str(file)!r} is a file"), message
    assert message.endswith(f"give its folder {str(bert_folder)!r}"), message
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_file_for_a_preset_is_refused_naming_its_folder(tmp_path):
    folder = tmp_path / "tok"
    train_tokenizer("gpt", TEXTS, 300, min_frequency=1).save_pretrained(folder)
    file = folder / "tokenizer.json"
    with pytest.raises(TokenizerPathError, match=rf"recipe key 'tokenizer' '{file}' is a file; a tokenizer is loaded "
                                                 rf"from the folder that holds it .*: give its folder '{folder}'$"):
        pretrain_gpt.main(["--tokenizer", str(file), "--output_dir", str(tmp_path / "out"), *QUICK])
    assert not (tmp_path / "out").exists()


def test_a_lone_tokenizer_file_is_refused_asking_for_the_folder_save_pretrained_wrote(tmp_path):
    from train.data.tokenization import load_tokenizer

    folder = tmp_path / "tok"
    train_tokenizer("gpt", TEXTS, 300, min_frequency=1).save_pretrained(folder)
    lone = tmp_path / "vocabulary.json"
    lone.write_bytes((folder / "tokenizer.json").read_bytes())
    with pytest.raises(TokenizerPathError, match=r"is a file; .*give the folder that save_pretrained or "
                                         r"python -m train.train_tokenizer wrote"):
        load_tokenizer(lone, "gpt")


def test_a_checkpoint_without_tokenizer_files_is_not_given_a_tokenizer_of_special_tokens(tmp_path, capsys):
    """transformers 5.24's AutoTokenizer makes a tokenizer of the five BERT special tokens for a BERT folder without
    tokenizer files: training, converting and drawing attention refuse it instead of reading every word as [UNK]."""
    folder = tmp_path / "bert"
    reference_model("BertForSequenceClassification", bert_tokenizer()).save_pretrained(folder)
    out = tmp_path / "out"
    with pytest.raises(ModelSourceError, match=r"has no tokenizer files .* with a vocabulary .* give the checkpoint's "
                                               r"tokenizer with --tokenizer FOLDER"):
        finetune.main(["--model", str(folder), "--task", "nli", "--output_dir", str(out), *QUICK])
    specials = r"\(\[PAD\] \[UNK\] \[CLS\] \[SEP\] \[MASK\]\)"
    with pytest.raises(EmptyVocabularyError, match=rf"recipe key 'tokenizer' '{folder}' holds only its 5 special "
                                                   rf"tokens {specials} .*--tokenizer"):
        finetune.main(["--model", str(folder), "--tokenizer", str(folder), "--task", "nli", "--output_dir", str(out),
                       *QUICK])
    with pytest.raises(AttentionInputError, match="has no tokenizer files with a vocabulary: .* 5 special tokens"):
        attention_maps.main(["--model", str(folder), "--text", "the cat", "--output_dir", str(out)])
    assert not out.exists()
    convert.main([str(folder), str(out), "--to", "lineage"])
    assert "SRC has no tokenizer, none copied" in capsys.readouterr().out
    assert not {"tokenizer.json", "tokenizer_config.json", "vocab.txt"} & {path.name for path in out.iterdir()}


# ----------------------------------------------------------------------------------------------------------
# LoRA targets
# ----------------------------------------------------------------------------------------------------------


def test_a_lora_target_that_is_no_layer_is_refused_listing_the_layers():
    pytest.importorskip("peft")
    from train.setup.lora import apply_lora, check_target_modules

    model = modeling.LineageBertForSequenceClassification(preset("bert-tiny"))
    with pytest.raises(RecipeError) as refused:
        check_target_modules(model, ["q_proj", "nope", "attention"])
    assert str(refused.value) == (
        "recipe key 'lora.target_modules': 'nope', 'attention' name no linear layer of "
        "LineageBertForSequenceClassification; its linear layers are q_proj, k_proj, v_proj, o_proj, up_proj, "
        "down_proj, dense, classifier (a name matches every layer whose dotted path ends with it)")
    assert apply_lora(model, {"target_modules": ["sublayer.q_proj", "v_proj"]}) is not None  # peft's suffix rule


def test_finetune_refuses_a_lora_target_before_training(bert_folder, tmp_path):
    pytest.importorskip("peft")
    with pytest.raises(RecipeError, match=r"^recipe key 'lora.target_modules': 'qkv' names no linear layer of "
                                          r"LineageBertForSequenceClassification; its linear layers are q_proj, "):
        finetune.main(["--model", str(bert_folder), "--task", "nli", "--output_dir", str(tmp_path / "out"),
                       "--lora", "{target_modules: [qkv]}", *QUICK])
    assert not (tmp_path / "out").exists()


def test_lora_targets_naming_only_the_head_are_refused_before_any_work(bert_folder, tmp_path, monkeypatch):
    """The head trains in full (peft's modules_to_save): targets naming it alone left LoRA nothing to adapt, and peft
    failed with a traceback after the tokenizer was trained."""
    pytest.importorskip("peft")
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))  # where a trained tokenizer would be kept
    out = tmp_path / "out"
    with pytest.raises(RecipeError) as refused:
        finetune.main(["--model", str(bert_folder), "--task", "nli", "--output_dir", str(out),
                       "--lora", "{target_modules: [classifier]}", *QUICK])
    assert str(refused.value) == (
        "recipe key 'lora.target_modules': 'classifier' names only layers of the head (classifier), which trains in "
        "full without LoRA; name at least one of the layers LoRA adapts in LineageBertForSequenceClassification: "
        "q_proj, k_proj, v_proj, o_proj, up_proj, down_proj, dense")
    with pytest.raises(RecipeError, match=r"^recipe key 'lora.target_modules': 'score' names only layers of the head "
                                          r"\(score\), .* in LineageGptForSequenceClassification: q_proj, k_proj, "
                                          r"v_proj, o_proj, up_proj, down_proj$"):
        finetune.main(["--recipe", "gpt-finetune-nli-tiny", "--output_dir", str(out),
                       "--lora", "{target_modules: [score]}", *QUICK])
    assert not out.exists() and not (tmp_path / "cache").exists()

# ----------------------------------------------------------------------------------------------------------
# The translation pipeline over a model that does not translate
# ----------------------------------------------------------------------------------------------------------


def test_the_translation_pipeline_over_a_bert_names_the_models_that_translate(bert_folder):
    from transformers import AutoTokenizer

    from modeling.pipelines_lineage import LineageTranslationPipeline

    model = modeling.LineageBertForMaskedLM.from_pretrained(bert_folder)
    with pytest.raises(ValueError) as refused:
        LineageTranslationPipeline(model=model, tokenizer=AutoTokenizer.from_pretrained(bert_folder),
                                   task="translation")
    assert str(refused.value) == (
        "the translation pipeline needs an encoder-decoder model that generates: a Lineage Transformer or RNN "
        "(LineageTransformerForConditionalGeneration or LineageRnnForConditionalGeneration, as train_translation "
        "saves them); LineageBertForMaskedLM serves fill-mask")


# ----------------------------------------------------------------------------------------------------------
# train_translation's columns
# ----------------------------------------------------------------------------------------------------------


def test_train_translation_names_the_columns_it_reads(tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"en": "one", "de": "eins"}) + "\n" for _ in range(4)))
    with pytest.raises(MissingColumnError) as refused:
        train_translation.main(["--train_file", str(data), "--output_dir", str(tmp_path / "out"), *QUICK])
    message = str(refused.value)
    assert message.startswith(f"{data}: no column 'source' in line 1; the file has columns ['en', 'de']"), message
    assert "recipe keys source_column and target_column" in message and "text_column" not in message
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------------------------
# Generating past the decoder's positions
# ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator():
    return AutoModelForSeq2SeqLM.from_config(preset("transformer-tiny")).eval()  # 64 positions


SOURCE = torch.tensor([[5, 6, 7]])


def test_a_transformer_refuses_max_new_tokens_past_its_decoder_positions_before_decoding(translator):
    steps = []
    handle = translator.model.decoder.register_forward_pre_hook(lambda module, args: steps.append(1))
    try:
        with pytest.raises(ValueError) as refused:
            translator.generate(SOURCE, max_new_tokens=80, do_sample=False)
    finally:
        handle.remove()
    assert str(refused.value) == (
        "Generating up to 81 tokens exceeds the decoder's context window (`max_position_embeddings`=64); with a "
        "1-token decoder prompt `max_new_tokens` must be in [1, 63] (and `max_length` at most 64).")
    assert not steps  # no decoding step ran
    with pytest.raises(ValueError, match=r"`max_length` at most 64"):
        translator.generate(SOURCE, max_length=100, do_sample=False)
    longest = translator.generate(SOURCE, max_new_tokens=63, do_sample=False, eos_token_id=None)
    assert longest.shape == (1, 64)


def test_a_decoder_prompt_longer_than_the_positions_is_refused(translator):
    with pytest.raises(ValueError, match=r"^The decoder prompt \(`decoder_input_ids`\) has 70 tokens but the decoder's "
                                         r"context window \(`max_position_embeddings`\) is 64"):
        translator.generate(SOURCE, decoder_input_ids=torch.ones(1, 70, dtype=torch.long), max_new_tokens=2)


def test_the_rnn_has_no_position_limit():
    rnn = AutoModelForSeq2SeqLM.from_config(preset("rnn-tiny")).eval()
    assert rnn.generate(SOURCE, max_new_tokens=80, do_sample=False, eos_token_id=None).shape == (1, 81)
