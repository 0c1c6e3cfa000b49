"""Tokenizers are trained once, on a bounded sample, and reused by the next run on the same data (issue 30, item 3):
the cache key hashes the sampled texts themselves, or the fingerprint of data read from files, so a tokenizer is reused
only where training would give the same one, whatever the output folder."""

import os

import pytest

from train.data import tokenization
from train.data.corpus import default_corpus
from train.data.files import load_text_dataset
from train.data.token_store import data_key
from train.data.tokenization import reused_or_trained, train_tokenizer
from train.pretrain_gpt import main as pretrain_gpt

TEXTS = default_corpus("documents", "train", 0, 120)["text"]


def test_a_second_run_on_the_same_data_reuses_the_tokenizer_in_another_output_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    argv = ["--recipe", "gpt-pretrain-tiny", "--progress_bar", "false", "--report_to", "none", "--max_steps", "1",
            "--tokenizer_vocab_size", "300"]
    pretrain_gpt([*argv, "--output_dir", str(tmp_path / "a")])
    assert "tokenizer: trained on all 100 texts" in capsys.readouterr().out

    def never(*args, **kwargs):
        raise AssertionError("the tokenizer was trained again")

    monkeypatch.setattr(tokenization, "train_tokenizer", never)
    pretrain_gpt([*argv, "--output_dir", str(tmp_path / "b")])
    assert "tokenizer: reused" in capsys.readouterr().out
    assert (tmp_path / "a" / "tokenizer" / "tokenizer.json").read_bytes() == (
        tmp_path / "b" / "tokenizer" / "tokenizer.json").read_bytes()
    with pytest.raises(AssertionError, match="trained again"):  # other data, or another vocabulary size: trained
        pretrain_gpt([*argv, "--output_dir", str(tmp_path / "c"), "--tokenizer_vocab_size", "290"])


def test_the_sample_is_the_first_texts_up_to_tokenizer_train_size(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    limit = sum(map(len, TEXTS[:30]))  # exactly 30 texts
    tokenizer = reused_or_trained("gpt", lambda: iter(TEXTS), 300, sample_size=limit, model_max_length=64)
    assert f"trained on the first 30 texts ({limit:,} characters, tokenizer_train_size)" in capsys.readouterr().out
    direct = train_tokenizer("gpt", TEXTS[:30], 300, model_max_length=64)
    assert tokenizer.backend_tokenizer.to_str() == direct.backend_tokenizer.to_str()


def test_a_damaged_cache_entry_is_trained_again(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    first = reused_or_trained("bert", lambda: iter(TEXTS), 300, sample_size=None, model_max_length=64)
    (entry,) = (tmp_path / "cache" / "tokenizers").iterdir()
    (entry / "tokenizer.json").write_text("{not json")
    capsys.readouterr()
    again = reused_or_trained("bert", lambda: iter(TEXTS), 300, sample_size=None, model_max_length=64)
    assert "tokenizer: trained on all" in capsys.readouterr().out
    assert again.get_vocab() == first.get_vocab()
    assert [p.name for p in (tmp_path / "cache" / "tokenizers").iterdir()] == [entry.name]


def test_a_tokenizer_of_data_read_from_files_is_found_by_its_fingerprint_without_reading_it(tmp_path, monkeypatch,
                                                                                            capsys):
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    first = reused_or_trained("gpt", lambda: iter(TEXTS), 300, sample_size=None, model_max_length=64, data_key="k1")
    assert "tokenizer: trained on all 120 texts" in capsys.readouterr().out

    def unread():
        raise AssertionError("the data was read")

    again = reused_or_trained("gpt", unread, 300, sample_size=None, model_max_length=64, data_key="k1")
    assert "tokenizer: reused" in capsys.readouterr().out and again.get_vocab() == first.get_vocab()
    with pytest.raises(AssertionError, match="the data was read"):  # other data, or another sample: trained
        reused_or_trained("gpt", unread, 300, sample_size=1000, model_max_length=64, data_key="k1")


def test_a_file_edited_with_its_size_and_mtime_kept_trains_the_tokenizer_again(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"{text}\n" for text in TEXTS))

    def tokenizer():
        docs = load_text_dataset(str(path), cache_dir=str(tmp_path / "hf"), text_sample_by="line")
        return reused_or_trained("gpt", lambda: iter(docs["text"]), 300, sample_size=None, model_max_length=64,
                                 data_key=data_key(docs, ["text"]))

    first = tokenizer()
    tokenizer()
    assert "tokenizer: reused" in capsys.readouterr().out
    kept = os.stat(path)
    path.write_text(path.read_text().replace("a", "q"))  # the same length, other words
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    assert os.stat(path).st_size == kept.st_size
    again = tokenizer()
    assert "tokenizer: trained on all" in capsys.readouterr().out
    assert again.get_vocab() != first.get_vocab()
