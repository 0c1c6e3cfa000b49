"""Tokenizer training, templates, the clean-process AutoTokenizer reload, bad input, the CLI."""

import json
import re

import pytest
from conftest import run_clean_process
from transformers import AutoTokenizer

from train import train_tokenizer as cli
from train.data.corpus import tokenizer_training_texts
from train.data.tokenization import (
    MissingSpecialTokenError,
    TokenizerPathError,
    VocabularySizeError,
    canonical_family,
    check_special_tokens,
    config_kwargs_from_tokenizer,
    load_tokenizer,
    special_token_names,
    train_tokenizer,
    vocabulary_mismatch,
)


@pytest.fixture(scope="module")
def texts():
    return tokenizer_training_texts(size=500)


@pytest.fixture(scope="module")
def saved(texts, tmp_path_factory):
    """One trained tokenizer of each family, saved to its own folder."""
    root = tmp_path_factory.mktemp("tokenizers")
    out = {}
    for family, size in (("bert", 1000), ("gpt", 1000), ("seq2seq", 700)):
        tokenizer = train_tokenizer(family, texts, size, model_max_length=256)
        tokenizer.save_pretrained(root / family)
        out[family] = (tokenizer, root / family)
    return out


def test_special_token_ids_are_fixed(saved):
    for family, (tokenizer, _) in saved.items():
        names = special_token_names(family)
        assert tokenizer.convert_tokens_to_ids(names) == list(range(len(names)))
        assert tokenizer.pad_token_id == 0


def test_bert_templates_and_segments(saved):
    tok = saved["bert"][0]
    single = tok("Anna lives in Oslo.")
    assert tok.convert_ids_to_tokens(single["input_ids"]) == ["[CLS]", "anna", "lives", "in", "oslo", ".", "[SEP]"]
    assert single["token_type_ids"] == [0] * 7
    pair = tok("Anna lives in Oslo.", "She is a baker.")
    tokens = tok.convert_ids_to_tokens(pair["input_ids"])
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and tokens[-1] == "[SEP]"
    first_sep = tokens.index("[SEP]")
    assert pair["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
    assert tok.mask_token == "[MASK]" and tok.padding_side == "right"


def test_gpt_templates(saved):
    tok = saved["gpt"][0]
    single = tok.convert_ids_to_tokens(tok("The film was good.")["input_ids"])
    assert single[0] == "[START]" and single[-1] == "[EXTRACT]" and "[DELIM]" not in single
    pair = tok.convert_ids_to_tokens(tok("Anna lives in Oslo.", "Anna lives in Lima.")["input_ids"])
    assert pair[0] == "[START]" and pair[-1] == "[EXTRACT]" and pair.count("[DELIM]") == 1
    plain = tok("The film was good.", add_special_tokens=False)["input_ids"]
    assert tok.decode(plain) == "The film was good."  # byte-level: exact round trip, case kept
    assert tok.eos_token == "<|endoftext|>" and tok.padding_side == "left"
    assert "token_type_ids" not in tok("x")


def test_seq2seq_source_and_target(saved):
    tok = saved["seq2seq"][0]
    batch = tok(["seventy-two"], text_target=["zweiundsiebzig"])
    assert batch["input_ids"][0][-1] == batch["labels"][0][-1] == tok.eos_token_id
    assert tok.bos_token_id not in batch["input_ids"][0]
    for text in ("Im Garten gibt es dreihundertfünf Vögel.", "There are twenty-one cats in the park."):
        assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text
    assert config_kwargs_from_tokenizer(tok, "transformer") == {
        "vocab_size": len(tok), "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}


CLEAN_LOAD = """
import json
from transformers import AutoTokenizer
out = {}
for family in ("bert", "gpt", "seq2seq"):
    tok = AutoTokenizer.from_pretrained(FOLDERS[family])
    out[family] = {"class": type(tok).__name__, "max": tok.model_max_length, "side": tok.padding_side,
                 "pair": dict(tok("Anna lives in Oslo.", "She is a baker.")),
                 "single": dict(tok("Ich habe zwei Katzen.")),
                 "specials": {"pad": tok.pad_token, "mask": tok.mask_token, "eos": tok.eos_token,
                              "bos": tok.bos_token, "cls": tok.cls_token, "sep": tok.sep_token}}
print(json.dumps(out))
"""


def test_clean_process_autotokenizer_reload(saved, tmp_path):
    folders = {family: str(path) for family, (_, path) in saved.items()}
    stdout = run_clean_process(f"FOLDERS = {folders!r}\n" + CLEAN_LOAD, cwd=tmp_path)
    loaded = json.loads(stdout.strip().splitlines()[-1])
    for family, (tok, _) in saved.items():
        got = loaded[family]
        assert got["max"] == 256
        assert got["side"] == tok.padding_side
        assert got["pair"] == dict(tok("Anna lives in Oslo.", "She is a baker."))
        assert got["single"] == dict(tok("Ich habe zwei Katzen."))
    assert loaded["bert"]["specials"]["mask"] == "[MASK]" and "token_type_ids" in loaded["bert"]["pair"]
    assert loaded["gpt"]["specials"]["pad"] == "[PAD]" and loaded["gpt"]["specials"]["eos"] == "<|endoftext|>"
    assert loaded["seq2seq"]["specials"]["eos"] == "</s>" and loaded["seq2seq"]["specials"]["bos"] == "<s>"


def test_a_tokenizer_matches_a_checkpoint_when_every_token_keeps_its_id(saved, texts):
    bert, _ = saved["bert"]
    assert vocabulary_mismatch(bert, bert, len(bert)) is None
    other = train_tokenizer("bert", texts[: len(texts) // 5], 1000, model_max_length=256)
    differ = [t for t, i in bert.get_vocab().items() if other.get_vocab().get(t) != i]
    assert differ and re.fullmatch(f"{len(differ)} of its {len(bert)} tokens have another id or are missing "
                                   r"\(e\.g\. '[^']+', '[^']+', '[^']+'\)", vocabulary_mismatch(other, bert, len(bert)))
    assert vocabulary_mismatch(bert, None, bert.vocab_size) is None  # no tokenizer of its own: the rows decide
    assert vocabulary_mismatch(bert, None, 10) == (f"its vocabulary holds {bert.vocab_size} tokens, not counting "
                                                   "those added to it, for 10 embedding rows (vocab_size)")
    grown = train_tokenizer("bert", texts, 1000, model_max_length=256)
    grown.add_tokens(["<x>", "<y>"])  # added tokens past the rows get rows of their own: no mismatch
    assert len(grown) == bert.vocab_size + 2 and vocabulary_mismatch(grown, bert, bert.vocab_size) is None


def test_load_tokenizer_checks_the_family(saved):
    tok = load_tokenizer(saved["bert"][1], family="bert")
    assert tok.mask_token_id == 4
    check_special_tokens(AutoTokenizer.from_pretrained(saved["gpt"][1]), "gpt")


def test_missing_special_token_is_named(saved):
    folder = saved["bert"][1]
    with pytest.raises(MissingSpecialTokenError, match=rf"tokenizer {folder} has no bos_token .*<\|endoftext\|>"):
        load_tokenizer(folder, family="gpt")
    with pytest.raises(MissingSpecialTokenError, match=r"the tokenizer has no cls_token .*'\[CLS\]'"):
        check_special_tokens(saved["seq2seq"][0], "bert")


def test_a_folder_of_vocabulary_files_alone_is_refused_with_the_line_that_saves_it(texts, tmp_path):
    """`tokenizers`' save_model writes `vocab.txt` (WordPiece) or `vocab.json` and `merges.txt` (byte-level BPE) with
    no config naming a class: refused naming the argument, the folder and the line that saves it as a tokenizer
    folder, which then loads (before: transformers' ValueError 'Couldn't instantiate the backend tokenizer', a
    traceback, where the project's own refusals list these files as a tokenizer's)."""
    from tokenizers import BertWordPieceTokenizer, ByteLevelBPETokenizer
    from transformers import BertTokenizer, GPT2Tokenizer

    for name, trained, cls, lower in (("wordpiece", BertWordPieceTokenizer(), BertTokenizer, ", do_lower_case=True"),
                                      ("bpe", ByteLevelBPETokenizer(), GPT2Tokenizer, "")):
        folder = tmp_path / name
        folder.mkdir()
        trained.train_from_iterator(texts, vocab_size=300)
        trained.save_model(str(folder))
        files = "vocab.txt" if name == "wordpiece" else "merges.txt and vocab.json"
        with pytest.raises(TokenizerPathError, match=re.escape(
                f"recipe key 'tokenizer': folder '{folder}' holds {files} alone, ") + r".* as tokenizers' save_model "
                r"writes it, with no tokenizer_config.json to name the tokenizer that reads it: save it as a tokenizer "
                rf"folder, e.g. python -c \"from transformers import {cls.__name__}; " + re.escape(
                    f"{cls.__name__}.from_pretrained('{folder}'{lower}).save_pretrained('{folder}')\"")):
            load_tokenizer(folder, argument="recipe key 'tokenizer'")
        cls.from_pretrained(folder, **({"do_lower_case": True} if lower else {})).save_pretrained(folder)
        loaded = load_tokenizer(folder, argument="recipe key 'tokenizer'").get_vocab()
        assert trained.get_vocab().items() <= loaded.items()  # GPT2Tokenizer adds <|endoftext|>


def test_vocab_size_too_small(texts):
    with pytest.raises(VocabularySizeError, match=r"vocab_size=4 .* 5 special tokens \[PAD\] \[UNK\]"):
        train_tokenizer("bert", texts, 4)
    with pytest.raises(VocabularySizeError, match="256 byte symbols; use vocab_size >= 261"):
        train_tokenizer("gpt", texts, 200)


def test_no_text_and_unknown_family():
    with pytest.raises(ValueError, match="no non-empty text"):
        train_tokenizer("bert", ["", "   "], 100)
    with pytest.raises(ValueError, match="unknown tokenizer family 'roberta'"):
        train_tokenizer("roberta", ["a"], 100)


def test_cli_trains_and_saves(tmp_path, capsys):
    data = tmp_path / "pairs.jsonl"
    rows = [{"source": f"I have {n} cats.", "target": f"Ich habe {n} Katzen."} for n in ("two", "three", "four")]
    data.write_text("\n".join(json.dumps(r) for r in rows * 20), encoding="utf-8")
    out = tmp_path / "tok"
    cli.main(["--family", "transformer", "--vocab_size", "120", "--dataset", str(data), "--text_column", "source",
              "--text_column", "target", "--output_dir", str(out), "--min_frequency", "1"])
    assert "saved a transformer tokenizer" in capsys.readouterr().out
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.decode(tok("Ich habe three Katzen.")["input_ids"], skip_special_tokens=True) == "Ich habe three Katzen."
    cli.main(["--family", "bert", "--vocab_size", "300", "--max_texts", "50", "--output_dir", str(tmp_path / "b")])
    assert (tmp_path / "b" / "tokenizer.json").exists() and (tmp_path / "b" / "tokenizer_config.json").exists()


# ---------------------------------------------------------------------------------------------------------------
# Tokenizers saved beside a model: transformers 5.23's AutoTokenizer reads the model's config.json first
# ---------------------------------------------------------------------------------------------------------------

MODEL_FOLDERS = {"bert": ("LineageBertForMaskedLM", "bert-tiny"), "gpt": ("LineageGptForCausalLM", "gpt-tiny"),
                 "transformer": ("LineageTransformerForConditionalGeneration", "transformer-tiny"),
                 "rnn": ("LineageRnnForConditionalGeneration", "rnn-tiny")}


@pytest.fixture(scope="module")
def model_folders(saved, tmp_path_factory):
    """A saved model of every family with its tokenizer beside it, as a training run writes them."""
    from conftest import preset

    import modeling

    root = tmp_path_factory.mktemp("model-folders")
    folders = {}
    for family, (class_name, preset_name) in MODEL_FOLDERS.items():
        tokenizer = saved[canonical_family(family)][0]
        config = preset(preset_name, **config_kwargs_from_tokenizer(tokenizer, family))
        getattr(modeling, class_name)(config).save_pretrained(root / family)
        tokenizer.save_pretrained(root / family)
        folders[family] = (tokenizer, root / family)
    return folders


NO_CODE_LOAD = """
import io, json, sys
from transformers import AutoTokenizer, PreTrainedTokenizerFast
out = {}
for family, folder in FOLDERS.items():
    auto = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    fast = PreTrainedTokenizerFast.from_pretrained(folder)
    out[family] = [{"class": type(t).__name__, "side": t.padding_side,
                    "pair": dict(t("Anna lives in Oslo.", "Tom sings.")), "specials": t.all_special_tokens}
                   for t in (auto, fast)]
sys.stdin = io.StringIO("")  # the prompt below reads an empty answer, as from a closed terminal
plain = AutoTokenizer.from_pretrained(FOLDERS["bert"])
out["plain"] = {"class": type(plain).__name__, "mask": plain.mask_token}
out["ran_code"] = any(name.startswith("transformers_modules") for name in sys.modules)
print()
print("RESULT " + json.dumps(out))
"""


def test_model_folders_load_their_tokenizer_in_a_clean_process_without_running_code(model_folders, tmp_path):
    folders = {family: str(folder) for family, (_, folder) in model_folders.items()}
    stdout = run_clean_process(f"FOLDERS = {folders!r}\n" + NO_CODE_LOAD, cwd=tmp_path)
    loaded = json.loads(stdout.split("\nRESULT ")[-1])
    for family, (tok, _) in model_folders.items():
        for got in loaded[family]:
            assert got["class"] == "TokenizersBackend" and got["side"] == tok.padding_side
            assert got["pair"] == dict(tok("Anna lives in Oslo.", "Tom sings."))
            assert got["specials"] == tok.all_special_tokens
    assert not loaded["ran_code"]
    # Without the flag, AutoTokenizer loads config.json (auto_map, model_type lineage-*) before tokenizer_config.json
    # and asks whether to run its code; on "no" it falls back to the generic config and the same tokenizer. This
    # documents transformers 5.23's order (docs/using.md): if it changes, the docs' advice can be simplified.
    assert "Do you wish to run the custom code?" in stdout
    assert loaded["plain"] == {"class": "TokenizersBackend", "mask": "[MASK]"}


def test_a_process_that_imported_modeling_loads_without_asking(model_folders, monkeypatch):
    def no_prompt(*args):
        raise AssertionError("AutoTokenizer asked whether to run custom code")

    monkeypatch.setattr("builtins.input", no_prompt)
    for family, (tok, folder) in model_folders.items():
        loaded = AutoTokenizer.from_pretrained(folder)
        assert loaded("Ich habe zwei Katzen.")["input_ids"] == tok("Ich habe zwei Katzen.")["input_ids"], family
