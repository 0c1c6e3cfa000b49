"""Corpora prepared once (issue 30): the store holds exactly the tokens the packing and pairing functions give, 2
bytes a token; it is the same whatever the number of processes, reused by later runs, keyed by what the tokens depend
on, and never left half-written; BERT's pairs are an index of token ranges; streams are packed and paired lazily and
resume where they stopped."""

import json
import os
import random
import re
import subprocess
import sys

import datasets
import numpy as np
import pytest

from train import corpus_benchmark
from train.data import token_store, workers
from train.data.corpus import tokenizer_training_texts
from train.data.encoders import create_nsp_examples, pack_documents, tokenize_documents
from train.data.files import load_text_dataset
from train.data.model_inputs import prepare_causal_lm_dataset, prepare_nsp_dataset
from train.data.tokenization import cache_folder, train_tokenizer
from train.prepare import main as prepare
from train.pretrain_gpt import main as pretrain_gpt

RUN = ["--progress_bar", "false", "--report_to", "none", "--max_steps", "2", "--save_steps", "0"]


@pytest.fixture(scope="module")
def gpt():
    return train_tokenizer("gpt", tokenizer_training_texts(size=300), 800)


@pytest.fixture(scope="module")
def bert():
    return train_tokenizer("bert", tokenizer_training_texts(size=300), 800)


@pytest.fixture(scope="module")
def docs():
    return load_text_dataset("embedded:documents", size=120)


def rows(dataset) -> list[dict]:
    return [dataset[i] for i in range(len(dataset))]


def files(store: token_store.TokenStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(store.folder.iterdir()) if p.name != "store.json"}


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LINEAGE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "prepared"


def test_blocks_are_the_packed_documents_two_bytes_a_token(gpt, docs, fresh_cache):
    blocks = prepare_causal_lm_dataset(docs, gpt, 48, pack_documents=True)
    ids = gpt(list(docs["text"]), add_special_tokens=False)["input_ids"]
    assert rows(blocks) == list(pack_documents(ids, 48, gpt.eos_token_id))
    store = blocks.store
    assert store.info["tokens"] == sum(len(i) + 1 for i in ids) and store.info["dtype"] == "uint16"
    assert (store.folder / "tokens.bin").stat().st_size == 2 * store.info["tokens"]
    assert (store.folder / "items.npy").stat().st_size < 8 * (len(docs) + 1) + 200  # one offset a document


@pytest.mark.parametrize("block_size, drop_last", [(7, True), (7, False), (48, True), (48, False), (50_000, False)])
def test_blocks_know_their_lengths_and_the_shape_check_reads_no_block(gpt, docs, fresh_cache, monkeypatch,
                                                                       block_size, drop_last):
    """`row_lengths` is the set of the blocks' lengths as read, so `check_bounded_shapes` (CUDA graphs) decides on a
    prepared corpus of any size without reading its blocks."""
    from train.data.collators import CausalLMCollator
    from train.run.compilation import check_bounded_shapes
    from train.run.recipes import RecipeError

    blocks = prepare_causal_lm_dataset(docs, gpt, block_size, pack_documents=True, drop_last=drop_last)
    assert blocks.row_lengths == {len(row["input_ids"]) for row in rows(blocks)}
    monkeypatch.setattr(token_store.CausalBlocks, "__getitem__", lambda *a: pytest.fail("a block was read"))
    collator = CausalLMCollator(gpt)
    if len(blocks.row_lengths) == 1:
        check_bounded_shapes("reduce-overhead", collator, blocks)
    else:
        with pytest.raises(RecipeError, match="2 lengths"):
            check_bounded_shapes("reduce-overhead", collator, blocks)


@pytest.mark.parametrize("layout", token_store.LAYOUTS)
def test_the_store_is_the_same_with_several_processes(gpt, bert, docs, fresh_cache, monkeypatch, layout):
    tokenizer = gpt if layout == "documents" else bert
    one = files(token_store.prepared_store(docs, tokenizer, layout, num_proc=1))
    for store in fresh_cache.iterdir():
        store.rename(store.with_name("one-" + store.name))
    monkeypatch.setattr(workers, "ROWS_PER_PROCESS", 10)
    monkeypatch.setattr(workers, "usable_cores", lambda: 3)  # three parts on any machine (num_proc is capped at it)
    two = token_store.prepared_store(docs, tokenizer, layout, num_proc=3)
    assert two.info["processes"] == 3 and files(two) == one


def test_a_prepared_corpus_is_reused_and_keyed_by_its_data_and_tokenizer(gpt, tmp_path, fresh_cache, capsys):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"Document {i} says something about the number {i * 7}.\n" for i in range(300)))
    first = token_store.prepared_store(load_text_dataset(str(path), cache_dir=str(tmp_path / "hf")), gpt, "documents")
    written = os.stat(first.folder / "tokens.bin").st_mtime_ns
    again = token_store.prepared_store(load_text_dataset(str(path), cache_dir=str(tmp_path / "hf")), gpt, "documents")
    assert again.folder == first.folder and os.stat(again.folder / "tokens.bin").st_mtime_ns == written
    assert "prepared corpus reused from" in capsys.readouterr().out
    smaller = train_tokenizer("gpt", tokenizer_training_texts(size=300), 600)
    other_tokenizer = token_store.prepared_store(load_text_dataset(str(path), cache_dir=str(tmp_path / "hf")), smaller,
                                              "documents")
    path.write_text(path.read_text() + "One more line.\n")
    changed = token_store.prepared_store(load_text_dataset(str(path), cache_dir=str(tmp_path / "hf")), gpt, "documents")
    assert len({first.folder, other_tokenizer.folder, changed.folder}) == 3
    assert changed.info["documents"] == 301


def test_a_stopped_preparation_leaves_nothing_behind(gpt, docs, fresh_cache, monkeypatch):
    def stop(*args):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(token_store, "_join_parts", stop)
        with pytest.raises(KeyboardInterrupt):
            token_store.prepared_store(docs, gpt, "documents")
    assert list(fresh_cache.iterdir()) == []
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    killed = fresh_cache / f".abc.tmp-{int(gone.stdout)}-x1"  # the staging folder of a process killed mid-way
    killed.mkdir()
    (killed / "part-0.tokens").write_bytes(b"\0" * 10)
    store = token_store.prepared_store(docs, gpt, "documents")
    assert [p.name for p in fresh_cache.iterdir()] == [store.folder.name]


def test_ids_above_65535_are_stored_in_four_bytes():
    assert token_store.token_dtype([0] * 2**16) == "uint16"
    assert token_store.token_dtype([0] * (2**16 + 1)) == "uint32"


def test_sentence_pairs_are_those_of_the_documents_and_their_index_is_kept(bert, docs, fresh_cache):
    pairs = prepare_nsp_dataset(docs, bert, max_length=40, seed=5)
    documents, _ = tokenize_documents(list(docs["sentences"]), bert, split=False)
    assert rows(pairs) == create_nsp_examples(documents, bert, max_length=40, seed=5)
    assert pairs.pairs.shape == (len(pairs), 5)  # five offsets a pair, whatever the corpus size
    index = next(pairs.store.folder.glob("pairs-*.npy"))
    written = os.stat(index).st_mtime_ns
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    killed = pairs.store.folder / f".pairs-x.npy.tmp-{int(gone.stdout)}-index.npy"  # of a process killed mid-index
    killed.write_bytes(b"\0" * 10)
    masked_only = prepare_nsp_dataset(docs, bert, max_length=40, seed=5, next_sentence=False)
    assert os.stat(index).st_mtime_ns == written and not killed.exists()
    assert [{k: r[k] for k in ("input_ids", "token_type_ids")} for r in rows(pairs)] == rows(masked_only)


def test_the_pair_index_matches_pairs_built_from_token_lists(bert):
    """`create_nsp_examples` runs on the index; its pairs still hold whole sentences of one document (A) and the
    next ones or another document's (B), on documents with empty sentences and empty documents."""
    rng = random.Random(1)
    documents = [[[d * 1000 + 100 + s * 30 + t for t in range(rng.randrange(0, 12))]
                  for s in range(rng.randrange(0, 7))] for d in range(80)]
    examples = create_nsp_examples(documents, bert, max_length=32, seed=2, dupe_factor=2, short_seq_prob=0.3)
    assert examples and all(len(e["input_ids"]) <= 32 for e in examples)
    for e in examples:
        split = e["input_ids"].index(bert.sep_token_id)
        a, b = e["input_ids"][1:split], e["input_ids"][split + 1:-1]
        assert len({t // 1000 for t in a}) == 1 and len({t // 1000 for t in b}) == 1
        assert (a[0] // 1000 == b[0] // 1000) == (e["next_sentence_label"] == 0)


def test_a_stream_is_packed_and_paired_lazily_and_resumes_where_it_stopped(gpt, bert, docs, monkeypatch):
    monkeypatch.setattr(token_store, "ROWS_PER_BATCH", 40)
    stream = docs.to_iterable_dataset(num_shards=3)
    for lazy in (prepare_causal_lm_dataset(stream, gpt, 32, pack_documents=True),
                 prepare_nsp_dataset(stream, bert, max_length=32, seed=3)):
        whole = list(lazy)
        assert whole and all(len(r["input_ids"]) <= 32 for r in whole)
        seen = []
        for row in lazy:
            seen.append(row)
            if len(seen) == len(whole) // 2:
                state = lazy.state_dict()
                break
        lazy.load_state_dict(state)
        assert seen + list(lazy) == whole
    pairs = list(prepare_nsp_dataset(stream, bert, max_length=32, seed=3))
    assert 0.3 < np.mean([p["next_sentence_label"] for p in pairs]) < 0.7


def test_lineage_prepare_then_a_run_opens_the_store(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"text": "Text {i} is about {i % 17} cats and {i % 5} dogs."}}\n' for i in range(400)))
    keys = ["--recipe", "gpt-pretrain-tiny", "--train_file", str(corpus), "--max_seq_length", "32"]
    train, validation = prepare([*keys, "--num_proc", "2"])
    assert validation is None and len(train) > 10
    assert "prepared 400 documents" in capsys.readouterr().out
    results, _ = pretrain_gpt([*keys, *RUN, "--output_dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert f"prepared corpus reused from {train.store.folder}" in out and "tokenizer: reused" in out
    assert results["steps"] == 2
    assert not any(p.name.startswith(".") for p in (cache_folder() / "prepared").iterdir())


def test_prepare_and_the_run_hold_out_the_same_rows(tmp_path, capsys):
    """Training files of no validation split with `eval_size`: `lineage prepare` holds out the rows the run will, so
    the run opens the store of the rows it trains on and evaluates on the others."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"text": "Text {i}: {i % 13} owls and {i % 7} foxes."}}\n' for i in range(400)))
    keys = ["--recipe", "gpt-pretrain-tiny", "--train_file", str(corpus), "--max_seq_length", "32", "--eval_size", "20"]
    train, validation = prepare(keys)
    assert validation is not None and "prepared 380 documents" in capsys.readouterr().out
    results, _ = pretrain_gpt([*keys, *RUN, "--output_dir", str(tmp_path / "run")])
    assert f"prepared corpus reused from {train.store.folder}" in capsys.readouterr().out
    assert results["steps"] == 2 and "eval_loss" in results


def test_prepare_refuses_a_stream_and_keys_of_the_other_pretraining(tmp_path):
    from train.run.recipes import RecipeError

    with pytest.raises(RecipeError, match="'streaming' is true: a stream is read as the run trains"):
        prepare(["--recipe", "gpt-pretrain-tiny", "--streaming", "true", "--max_steps", "2"])
    with pytest.raises(RecipeError, match="'nsp' is read by pretrain_bert only; this recipe prepares for pretrain_gpt"):
        prepare(["--recipe", "gpt-pretrain-tiny", "--nsp", "false"])


def test_data_made_in_memory_is_keyed_by_its_texts(gpt, fresh_cache):
    a = datasets.Dataset.from_dict({"text": ["one two", "three"]})
    b = datasets.Dataset.from_dict({"text": ["one two", "three"]})  # the same texts, another random fingerprint
    assert (token_store.prepared_store(a, gpt, "documents").folder
            == token_store.prepared_store(b, gpt, "documents").folder)


def test_the_corpus_benchmark_prepares_runs_and_streams_a_corpus_of_the_size_asked(tmp_path):
    """`lineage corpus-benchmark` end to end on a 0.3 MB corpus in BERT's layout (timings are not asserted)."""
    out = tmp_path / "bench.json"
    results = corpus_benchmark.main(["--family", "bert", "--size-mb", "0.3", "--unique-mb", "0.1", "--num_proc", "2",
                                     "--work", str(tmp_path / "work"), "--json", str(out)])
    assert json.loads(out.read_text()) == {"written_by": "lineage corpus-benchmark", **results}
    corpus = tmp_path / "work" / "corpus-bert-0.3mb-unique0.1mb.txt"
    assert 0.3e6 <= corpus.stat().st_size < 0.31e6 and "\n\n" in corpus.read_text()[:2000]
    assert results["prepare"]["bytes_per_token"] == 2 and results["prepare"]["tokens"] > 50_000
    for stage in corpus_benchmark.STAGES:
        assert results[stage]["seconds"] > 0 and results[stage]["peak_anon_mib"] > 50
    with pytest.raises(corpus_benchmark.CorpusBenchmarkError, match="unknown stage 'warm'"):
        corpus_benchmark.main(["--family", "gpt", "--size-mb", "1", "--stages", "prepare,warm"])


def test_the_corpus_benchmark_reads_its_documents_from_a_text_file(tmp_path):
    """`--text_file`: the distinct documents are the file's lines (GPT: one per line, repeated to the size asked), and
    `stream_tokenizer` streams with a tokenizer the run trains itself."""
    lines = [f"Document {i} tells of a river, a bridge and the town that grew beside them." for i in range(400)]
    (tmp_path / "english.txt").write_text("\n".join(lines) + "\n\n")
    results = corpus_benchmark.main(["--family", "gpt", "--size_mb", "0.1", "--unique_mb", "0.02", "--text_file",
                                     str(tmp_path / "english.txt"), "--stages", "stream_tokenizer",
                                     "--work", str(tmp_path / "work")])
    corpus = (tmp_path / "work" / "corpus-gpt-english-0.1mb-unique0.02mb.txt").read_text().splitlines()
    assert set(corpus) <= set(lines) and len(corpus) > len(set(corpus)) and 0.1e6 <= len("\n".join(corpus)) + 1
    assert results["text_file"] == str((tmp_path / "english.txt").resolve())
    assert results["stream_tokenizer"]["seconds"] > 0
    run = tmp_path / "work" / "run-gpt-stream_tokenizer" / "model"
    assert (run / "tokenizer.json").is_file()
    with pytest.raises(corpus_benchmark.CorpusBenchmarkError, match="fewer than --unique_mb"):
        corpus_benchmark.main(["--family", "gpt", "--size_mb", "1", "--unique_mb", "5", "--text_file",
                               str(tmp_path / "english.txt"), "--stages", "stream", "--work", str(tmp_path / "w2")])


def test_the_pair_order_is_pythons_shuffle_and_blocks_of_documents_change_no_pair(bert, docs, fresh_cache,
                                                                                  monkeypatch):
    from train.data import encoders

    for count in (0, 1, 2, 9, 500):
        listed, drawn = list(range(count)), random.Random(count)
        random.Random(count).shuffle(listed)
        assert encoders.shuffled_order(count, drawn).tolist() == listed
    whole = rows(prepare_nsp_dataset(docs, bert, max_length=40, seed=9))
    for store in fresh_cache.iterdir():
        for index in store.glob("pairs-*.npy"):
            index.unlink()
    monkeypatch.setattr(encoders, "_BLOCK", 7)  # documents read, and the index reordered, seven at a time
    assert rows(prepare_nsp_dataset(docs, bert, max_length=40, seed=9)) == whole
    assert not [p for store in fresh_cache.iterdir() for p in store.iterdir() if p.name.startswith(".")]


def test_whole_file_checks_run_once_per_unchanged_file(tmp_path, fresh_cache, monkeypatch):
    from train.data import files

    path = tmp_path / "corpus.txt"
    path.write_text("One sentence.\nAnother one.\n\nA second document.\nIts end.\n")
    assert load_text_dataset(str(path), cache_dir=str(tmp_path / "hf")).num_rows == 2

    def read(*args):
        raise AssertionError("read again")

    monkeypatch.setattr(files, "check_utf8", read)  # file_bytes' checks, where files looks them up
    monkeypatch.setattr(files, "has_paragraphs", read)
    assert load_text_dataset(str(path), cache_dir=str(tmp_path / "hf")).num_rows == 2
    keep_size_and_mtime(path, lambda text: text.replace("Another", "A other"))
    with pytest.raises(AssertionError, match="read again"):
        load_text_dataset(str(path), cache_dir=str(tmp_path / "hf"))


def keep_size_and_mtime(path, edit) -> None:
    """Edit `path`'s text as `cp -p` or `rsync -a` of an edited copy would leave it: the same size and times."""
    kept = os.stat(path)
    text = path.read_text()
    edited = edit(text)
    assert edited != text and len(edited.encode()) == len(text.encode())
    path.write_text(edited)
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (kept.st_size, kept.st_mtime_ns)


@pytest.mark.parametrize("suffix, row", [(".txt", "{}\n"), (".jsonl", '{{"text": "{}"}}\n'), (".csv", '"{}"\n')])
def test_an_edit_keeping_size_and_mtime_is_read_and_prepared_again(gpt, tmp_path, fresh_cache, capsys, suffix, row):
    path = tmp_path / f"corpus{suffix}"
    path.write_text(("text\n" if suffix == ".csv" else "") + "".join(
        row.format(f"Document {i} says something about the number {i * 7}.") for i in range(300)))
    first = token_store.prepared_store(load_text_dataset(str(path), cache_dir=str(tmp_path / "hf")), gpt, "documents")
    keep_size_and_mtime(path, lambda text: text.replace("Document 3 says", "Document 3 SAYS"))
    edited = load_text_dataset(str(path), cache_dir=str(tmp_path / "hf"))
    assert edited[3]["text"].startswith("Document 3 SAYS")
    capsys.readouterr()
    again = token_store.prepared_store(edited, gpt, "documents")
    assert again.folder != first.folder and "prepared 300 documents" in capsys.readouterr().out


DAMAGES = {  # what is done to a store -> what the line that prepares it again says
    "tokens.bin deleted": (lambda f: (f / "tokens.bin").unlink(),
                           r"tokens\.bin is missing \(its record says [\d,]+ bytes\)"),
    "tokens.bin truncated": (lambda f: os.truncate(f / "tokens.bin", 10),
                             r"tokens\.bin has 10 bytes, its record says [\d,]+"),
    "items.npy grown": (lambda f: (f / "items.npy").write_bytes((f / "items.npy").read_bytes() + b"\0"),
                        r"items\.npy has [\d,]+ bytes, its record says [\d,]+"),
    "record edited": (lambda f: (f / "store.json").write_text((f / "store.json").read_text().replace(
        '"processes": 1', '"processes": 2')), r"store\.json does not match its checksum [0-9a-f]{16}"),
    "record garbled": (lambda f: (f / "store.json").write_text("{not json"), r"store\.json cannot be read"),
    "record of an earlier release": (
        lambda f: (f / "store.json").write_text(json.dumps({k: v for k, v in json.loads(
            (f / "store.json").read_text()).items() if k not in ("files", "checksum")})),
        r"store\.json lists no file sizes or no checksum"),
    "record deleted": (lambda f: (f / "store.json").unlink(), r"store\.json is missing"),
}


def test_opening_a_store_reads_its_record_once(gpt, docs, fresh_cache, monkeypatch):
    folder = token_store.prepared_store(docs, gpt, "documents").folder
    reads, read_text = [], type(folder).read_text
    monkeypatch.setattr(type(folder), "read_text",
                        lambda path, *args, **kw: reads.append(path.name) or read_text(path, *args, **kw))
    assert token_store.TokenStore(folder).info["documents"] == 120
    assert reads == ["store.json"]


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_or_partial_store_is_prepared_again_saying_why(gpt, docs, fresh_cache, capsys, damage):
    store = token_store.prepared_store(docs, gpt, "documents")
    whole = files(store)
    harm, said = DAMAGES[damage]
    harm(store.folder)
    with pytest.raises(token_store.DamagedStoreError, match=said):
        token_store.TokenStore(store.folder)
    capsys.readouterr()
    again = token_store.prepared_store(docs, gpt, "documents")
    out = capsys.readouterr().out
    assert re.search(f"the prepared corpus in {re.escape(str(store.folder))} is damaged or partial: {said}"
                     r"[^\n]*; preparing it again", out)
    assert again.folder == store.folder and files(again) == whole and "prepared 120 documents" in out
    assert [p.name for p in fresh_cache.iterdir()] == [store.folder.name]  # the damaged one set aside and deleted


def test_a_truncated_pair_index_is_built_again(bert, docs, fresh_cache, capsys):
    whole = rows(prepare_nsp_dataset(docs, bert, max_length=40, seed=9))
    (index,) = [p for store in fresh_cache.iterdir() for p in store.glob("pairs-*.npy")]
    os.truncate(index, index.stat().st_size - 40)
    capsys.readouterr()
    assert rows(prepare_nsp_dataset(docs, bert, max_length=40, seed=9)) == whole
    assert f"{index}: the pair index is damaged" in capsys.readouterr().out


def test_a_run_on_a_truncated_store_prepares_it_again_and_trains(tmp_path, fresh_cache, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Line {i} tells of {i % 13} owls and {i % 7} foxes.\n" for i in range(400)))
    keys = ["--recipe", "gpt-pretrain-tiny", "--train_file", str(corpus), "--max_seq_length", "32"]
    train, _ = prepare(keys)
    os.truncate(train.store.folder / "tokens.bin", 100)
    capsys.readouterr()
    results, _ = pretrain_gpt([*keys, *RUN, "--output_dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert re.search(f"{re.escape(str(train.store.folder))} is damaged or partial: tokens.bin has 100 bytes, its "
                     r"record says [\d,]+; preparing it again", out)
    assert results["steps"] == 2 and "prepared 400 documents" in out
