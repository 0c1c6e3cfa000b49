"""`lineage prepare --num_proc K` on a folder of shards: its files read by K processes at once (datasets' own
`num_proc`) and its rows tokenized by K processes, into the same store one process writes."""

import datasets
import numpy as np
import pytest

from train.data.workers import usable_cores
from train.prepare import main as prepare


def test_a_folder_of_shards_is_read_and_tokenized_in_parallel_into_the_store_one_process_writes(tmp_path,
                                                                                              monkeypatch):
    from train.data.corpus import generate_records
    from train.data.tokenization import train_tokenizer

    texts = [r["text"] for r in generate_records("documents", "train", 0, 80)]
    (tmp_path / "shards").mkdir()
    for shard in range(4):
        (tmp_path / "shards" / f"part-{shard}.txt").write_text("\n".join(texts[shard::4]) + "\n")
    train_tokenizer("gpt", texts, 600, model_max_length=64).save_pretrained(tmp_path / "tokenizer")
    load, asked = datasets.load_dataset, []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: asked.append(k.get("num_proc")) or load(*a, **k))
    stores = []
    for processes in (1, 2):
        monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / f"cache-{processes}"))
        monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / f"hf-{processes}"))
        blocks, _ = prepare(["--recipe", "gpt-pretrain-tiny", "--train_file", str(tmp_path / "shards"),
                             "--tokenizer", str(tmp_path / "tokenizer"), "--num_proc", str(processes)])
        stores.append(blocks.store)
    assert asked == [1, 2]  # the four files read by one process, then by two at once
    assert stores[1].info["processes"] == min(2, usable_cores()) and stores[0].info["processes"] == 1
    assert stores[1].info["documents"] == len(texts)
    assert np.array_equal(stores[0].tokens, stores[1].tokens) and np.array_equal(stores[0].items, stores[1].items)


def test_prepare_refuses_bert_documents_with_no_sentence_pair_as_pretrain_bert_does(tmp_path, monkeypatch):
    """Training and validation documents are checked in one place (`pretraining.pretraining_documents`), so `prepare`
    refuses a validation file of one-sentence documents before any work, with `pretrain_bert`'s message."""
    from train.data.errors import DataError
    from train.pretrain_bert import main as pretrain_bert

    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    corpus, held_out = tmp_path / "corpus.txt", tmp_path / "held_out.txt"
    corpus.write_text("Anna was born in Oslo.\nShe moved to Rome.\n\nOmar was born in Cairo.\nHe stayed there.\n")
    held_out.write_text("Anna was born in Oslo.\nOmar was born in Cairo.\n")
    files = ["--train_file", str(corpus), "--validation_file", str(held_out)]
    refusal = r"held_out.txt: 2 documents, 2 sentences: no document has two sentences"
    with pytest.raises(DataError, match=refusal):
        prepare(["--recipe", "bert-pretrain-tiny", *files])
    with pytest.raises(DataError, match=refusal):
        pretrain_bert(["--recipe", "bert-pretrain-tiny", *files, "--output_dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()
