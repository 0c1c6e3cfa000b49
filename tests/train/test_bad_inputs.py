"""A catalogue of bad inputs (issue 16): model configs, recipe keys and values, data files, tokenizers, token ids,
shapes, generation arguments and conversion inputs. Each is refused before any work is done, with an error that
names the argument (or the file and line) and what is allowed. The table below is the catalogue; docs/reliability.md
lists it.
"""

import functools
import re

import pytest
import torch
import transformers
from conftest import preset
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
)

from modeling.conversion import from_transformers, to_transformers
from train import export, pretrain_gpt
from train.data.files import load_text_dataset
from train.data.tokenization import check_tokenizer_matches_model, train_tokenizer
from train.run import checkpoints
from train.run.recipes import RecipeError, recipe_from_dict
from train.setup.presets import load_model_config


@functools.cache
def gpt():
    return AutoModelForCausalLM.from_config(preset("gpt-tiny")).eval()


@functools.cache
def bert():
    return AutoModelForMaskedLM.from_config(preset("bert-tiny")).eval()


@functools.cache
def translator():
    return AutoModelForSeq2SeqLM.from_config(preset("transformer-tiny")).eval()


def recipe(**fields):
    return recipe_from_dict({"model": "gpt-tiny", "dataset": "embedded:documents", **fields})


def script(tmp, *argv):
    return pretrain_gpt.main(["--recipe", "gpt-pretrain-tiny", "--output_dir", str(tmp),
                              "--progress_bar", "false", *argv])


def write(tmp, name: str, content: bytes):
    path = tmp / name
    path.write_bytes(content)
    return path


IDS = torch.tensor([[5, 6]])


def _folder(path):
    path.mkdir()
    return path


def _config_only(tmp):
    """A folder holding a model's config.json and no weights."""
    preset("gpt-tiny").save_pretrained(tmp / "model")
    return tmp / "model"


# id, call (given a temporary folder), error type, the argument it names, what it says is allowed
CATALOGUE = [
    # model configs
    ("config hidden_size not divisible by heads", lambda t: preset("bert-tiny", hidden_size=30), ValueError,
     r"`hidden_size` \(30\)", r"divisible by `num_attention_heads` \(4\)"),
    ("config vocab_size 0", lambda t: preset("gpt-tiny", vocab_size=0), ValueError, "`vocab_size`",
     "positive integer"),
    ("config max_position_embeddings 0", lambda t: preset("gpt-tiny", max_position_embeddings=0), ValueError,
     "`max_position_embeddings`", "positive integer"),
    ("config type_vocab_size 0", lambda t: preset("bert-tiny", type_vocab_size=0), ValueError, "`type_vocab_size`",
     "positive integer"),
    ("config hidden_act unknown", lambda t: preset("bert-tiny", hidden_act="swishy"), ValueError, "`hidden_act`",
     r"one of \('relu', 'gelu'"),
    ("config norm_position unknown", lambda t: preset("gpt-tiny", norm_position="middle"), ValueError,
     "`norm_position`", r"one of \('post', 'pre'\)"),
    ("config dropout 1.5", lambda t: preset("bert-tiny", hidden_dropout_prob=1.5), ValueError,
     "`hidden_dropout_prob`", r"in \[0, 1\)"),
    ("attn_implementation unknown", lambda t: AutoModelForCausalLM.from_config(preset("gpt-tiny"),
                                                                               attn_implementation="flashy"),
     ValueError, "attn_implementation=\"flashy\"", "eager.*sdpa"),
    ("model preset unknown", lambda t: load_model_config("bert-huge"), FileNotFoundError, "'bert-huge'",
     "bert-base, bert-large, bert-tiny"),
    # recipe keys and values
    ("recipe key unknown", lambda t: recipe(learning_rte=1e-3), RecipeError, "'learning_rte'",
     "valid keys: model, model_overrides"),
    ("recipe value of the wrong type", lambda t: recipe(learning_rate="fast"), RecipeError, "'learning_rate'",
     "expects float"),
    ("recipe learning_rate negative", lambda t: recipe(learning_rate=-1e-3), RecipeError, "'learning_rate'",
     r"\(0, inf\)"),
    ("recipe mlm_probability 1.5", lambda t: recipe(mlm_probability=1.5), RecipeError, "'mlm_probability'",
     r"\(0, 1\)"),
    ("recipe adam_beta2 1", lambda t: recipe(adam_beta2=1.0), RecipeError, "'adam_beta2'", r"\[0, 1\)"),
    ("recipe batch size 0", lambda t: recipe(per_device_train_batch_size=0), RecipeError,
     "'per_device_train_batch_size'", r"\[1, inf\)"),
    ("recipe eval_size 0", lambda t: recipe(eval_size=0), RecipeError, "'eval_size'", r"\[1, inf\)"),
    ("recipe warmup_steps negative", lambda t: recipe(warmup_steps=-5), RecipeError, "'warmup_steps'",
     r"\[0, inf\)"),
    ("recipe save_total_limit 0", lambda t: recipe(save_total_limit=0), RecipeError, "'save_total_limit'",
     r"\[1, inf\)"),
    ("recipe seed negative", lambda t: recipe(seed=-1), RecipeError, "'seed'", r"\[0, 4294967295\]"),
    ("recipe lr_scheduler unknown", lambda t: recipe(lr_scheduler="poly"), RecipeError, "'lr_scheduler'",
     "linear, cosine, inverse_sqrt, constant"),
    ("recipe mixed_precision unknown", lambda t: recipe(mixed_precision="fp8"), RecipeError, "'mixed_precision'",
     "auto, no, fp16, bf16"),
    ("recipe report_to unknown", lambda t: recipe(report_to="tensorbord"), RecipeError, "'report_to'",
     "none, all, or one or several .* of aim, comet_ml, mlflow, tensorboard, wandb"),
    ("recipe no steps and no epochs", lambda t: recipe(max_steps=0, num_train_epochs=0), RecipeError,
     "'max_steps' and 'num_train_epochs'", "max_steps > 0 or num_train_epochs > 0"),
    ("recipe model_overrides misspelt", lambda t: script(t, "--model_overrides", "{hidden_sizes: 64}"), RecipeError,
     "'model_overrides': 'hidden_sizes'", "valid fields: .*hidden_size"),
    ("recipe max_seq_length beyond the model", lambda t: script(t, "--max_seq_length", "65"), RecipeError,
     "'max_seq_length' is 65", "64 positions"),
    ("resume_from_checkpoint missing", lambda t: checkpoints.resume_path(str(t / "nope"), t), ValueError,
     "resume_from_checkpoint", "'latest' or a checkpoint folder"),
    ("resume latest without checkpoints", lambda t: checkpoints.resume_path("latest", t), ValueError,
     "resume_from_checkpoint=latest", "no complete checkpoint"),
    # data files
    ("data file missing", lambda t: load_text_dataset(str(t / "train.jsonl")), FileNotFoundError, "train.jsonl",
     "no such data file"),
    ("validation file missing, before the training file is read (here: not UTF-8)", lambda t: script(
        t / "run", "--train_file", str(write(t, "a.txt", b"caf\xe9\n")), "--validation_file", str(t / "dev.txt")),
     FileNotFoundError, "dev.txt", r"no such data file \(recipe key 'validation_file'\)"),
    ("data file empty", lambda t: load_text_dataset(str(write(t, "a.txt", b""))), ValueError, "a.txt",
     "the data file is empty"),
    ("data file not UTF-8", lambda t: load_text_dataset(str(write(t, "a.txt", b"ok\ncaf\xe9\n"))), ValueError,
     "a.txt: line 2", "not valid UTF-8.*re-encode the file as UTF-8"),
    ("data JSON line broken", lambda t: load_text_dataset(str(write(t, "a.jsonl", b'{"text": "a"}\n{"text": \n'))),
     ValueError, "a.jsonl: line 2", "not valid JSON"),
    ("data column missing", lambda t: load_text_dataset(str(write(t, "a.csv", b"sentence,label\nhi,1\n")),
                                                        columns=("text", "label")), ValueError,
     "a.csv: no column 'text'", r"has columns \['sentence', 'label'\]"),
    ("data file type unknown", lambda t: load_text_dataset(str(write(t, "a.xml", b"<a/>"))), ValueError, "a.xml",
     r"name the file with one of \.txt, \.text, \.raw, \.jsonl"),
    ("embedded task unknown", lambda t: load_text_dataset("embedded:poetry"), ValueError, "'poetry'",
     "documents, translation, sentiment, nli, ner, qa"),
    # tokenizers
    ("tokenizer vocab_size too small", lambda t: train_tokenizer("gpt", ["a b"], 100), ValueError,
     "vocab_size=100", "vocab_size >= 261"),
    ("tokenizer kind unknown", lambda t: train_tokenizer("roberta", ["a b"], 100), ValueError, "'roberta'",
     "bert, gpt, seq2seq"),
    ("tokenizer larger than the model", lambda t: check_tokenizer_matches_model(
        train_tokenizer("bert", ["a b c d e f g"] * 2, 20), preset("bert-tiny", vocab_size=10)), ValueError,
     "vocab_size is 10", "vocab_size <= 10"),
    # token ids, shapes
    ("input_ids beyond the vocabulary", lambda t: gpt()(torch.tensor([[5, 99]])), ValueError, "`input_ids`",
     r"\[0, 99\) \(vocab_size=99\)"),
    ("input_ids negative", lambda t: bert()(torch.tensor([[5, -1]])), ValueError, "`input_ids`", r"\[0, 99\)"),
    ("token_type_ids beyond type_vocab_size", lambda t: bert()(IDS, token_type_ids=torch.tensor([[0, 2]])),
     ValueError, "`token_type_ids`", r"\[0, 2\) \(type_vocab_size=2\)"),
    ("position_ids beyond the table", lambda t: gpt()(IDS, position_ids=torch.tensor([[0, 64]])), ValueError,
     "`position_ids`", r"\[0, 64\)"),
    ("input_ids of one dimension", lambda t: gpt()(torch.tensor([5, 6])), ValueError, "`input_ids`",
     r"shape \(batch, length\)"),
    ("attention_mask of another shape", lambda t: bert()(IDS, attention_mask=torch.ones(1, 3)), ValueError,
     "`attention_mask`", r"shape of `input_ids` \(1, 2\)"),
    ("sequence longer than the position table", lambda t: gpt()(torch.ones(1, 65, dtype=torch.long)), ValueError,
     "`max_position_embeddings` is 64", "at most 64 tokens"),
    ("labels of another shape", lambda t: bert()(IDS, labels=torch.tensor([[1, 2, 3]])), ValueError, "`labels`",
     r"shape \(1, 2\)"),
    ("both input_ids and inputs_embeds", lambda t: gpt()(IDS, inputs_embeds=torch.zeros(1, 2, 32)), ValueError,
     "`input_ids` or `inputs_embeds`", "exactly one"),
    ("input_ids of floats", lambda t: gpt()(IDS.float()), ValueError, "`input_ids`",
     r"integer token ids \(torch.long or torch.int\), got torch.float32"),
    ("inputs_embeds of integers", lambda t: bert()(inputs_embeds=torch.ones(1, 2, 32, dtype=torch.long)), ValueError,
     "`inputs_embeds`", "floating point"),
    ("inputs_embeds of another width", lambda t: translator()(inputs_embeds=torch.zeros(1, 2, 31), labels=IDS),
     ValueError, "`inputs_embeds`", "32 features in its last dimension"),
    ("input_ids empty (a prompt of no tokens)", lambda t: gpt()(torch.ones(1, 0, dtype=torch.long)), ValueError,
     "`input_ids` is empty", "at least one token"),
    ("generate from an empty prompt", lambda t: gpt().generate(torch.ones(1, 0, dtype=torch.long), max_new_tokens=2,
                                                                do_sample=False), ValueError, "`input_ids` is empty",
     "at least one token"),
    # output folders, tokenizer folders, export (issue 24)
    ("output_dir that is a file", lambda t: script(write(t, "out", b"a file"), "--max_steps", "1"), RuntimeError,
     "recipe key 'output_dir': .*out is a file", "give a folder path"),
    ("tokenizer folder empty", lambda t: script(t / "run", "--tokenizer", str(_folder(t / "empty"))),
     FileNotFoundError, "recipe key 'tokenizer': folder .*empty", "tokenizer.json"),
    ("export a folder without weights",
     lambda t: export.main(["--model", str(_config_only(t)), "--output_dir", str(t / "x")]),
     ValueError, "--model .* has a config.json but no safetensors weights", "<output_dir>/model"),
    # generation arguments
    ("max_new_tokens beyond the context", lambda t: gpt().generate(IDS, max_new_tokens=80, do_sample=False),
     ValueError, "`max_new_tokens`", r"\[1, 62\]"),
    ("max_new_tokens negative", lambda t: gpt().generate(IDS, max_new_tokens=-1), ValueError, "`max_new_tokens`",
     "greater than 0"),
    ("temperature 0 when sampling", lambda t: gpt().generate(IDS, do_sample=True, temperature=0.0, max_new_tokens=2),
     ValueError, "`temperature`", "strictly positive"),
    # conversion inputs
    ("convert an unsupported reference class", lambda t: from_transformers(transformers.RobertaModel(
        transformers.RobertaConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                   intermediate_size=37))), TypeError, "RobertaModel",
     "supported classes: BertForMaskedLM"),
    ("convert BERT with relative positions", lambda t: from_transformers(transformers.BertModel(transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=37,
        position_embedding_type="relative_key"))), ValueError, "`position_embedding_type`", "absolute"),
    ("convert to an unsupported target", lambda t: to_transformers(torch.nn.Linear(2, 2)), TypeError, "Linear",
     "supported classes: LineageBert"),
]


def test_the_catalogue_holds_at_least_25_distinct_inputs():
    assert len(CATALOGUE) >= 25 and len({row[0] for row in CATALOGUE}) == len(CATALOGUE)


@pytest.mark.parametrize(("call", "error", "argument", "allowed"), [row[1:] for row in CATALOGUE],
                         ids=[row[0] for row in CATALOGUE])
def test_bad_input_is_refused_naming_the_argument_and_what_is_allowed(call, error, argument, allowed, tmp_path):
    with pytest.raises(error) as refused:
        call(tmp_path)
    message = str(refused.value)
    assert re.search(argument, message), message
    assert re.search(allowed, message), message


def test_a_script_refuses_bad_recipes_before_writing_anything(tmp_path):
    with pytest.raises(RecipeError, match="'learning_rate' must be in"):
        script(tmp_path / "run", "--learning_rate", "-1")
    assert not (tmp_path / "run").exists()
