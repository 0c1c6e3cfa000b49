"""Translation pairs as other tools write them: the Hub's layout (`{"translation": {"en": ..., "de": ...}}`, a
`datasets.Translation` feature, a parquet struct) read through `source_column` / `target_column` = `translation.en` /
`translation.de`, and columns of other names (a TSV with the header `en de`), give the same pairs in memory and
streamed; bad pairs are refused naming the file, the line and the entry, the same both ways; `train_translation` and
`lineage evaluate` read them."""

import json
from pathlib import Path

import datasets
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import hub_dataset

from train import evaluate, train_translation
from train.data.corpus import generate_records
from train.data.files import MissingColumnError, UnknownColumnError, load_text_dataset
from train.run.recipes import RecipeError, load_recipe
from train.train_translation import pair_columns, pairs

datasets.disable_progress_bars()

PAIRS = [(r["source"], r["target"]) for r in generate_records("translation", "train", size=40)]
HUB = ("translation.en", "translation.de")


def _hub_jsonl(folder: Path) -> Path:
    path = folder / "wmt.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "translation": {"de": de, "en": en}}) + "\n"
                            for i, (en, de) in enumerate(PAIRS)), encoding="utf-8")
    return path


def _translation_feature(folder: Path) -> Path:
    """As `load_dataset("wmt/wmt16", "de-en")` gives it: a `Translation` feature, saved with `save_to_disk`."""
    path = folder / "saved"
    features = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    dataset = datasets.Dataset.from_list([{"translation": {"de": de, "en": en}} for en, de in PAIRS], features=features)
    datasets.DatasetDict({"train": dataset}).save_to_disk(str(path), num_shards={"train": 2})
    return path


def _parquet_struct(folder: Path) -> Path:
    path = folder / "pairs.parquet"
    pq.write_table(pa.table({"translation": [{"en": en, "de": de} for en, de in PAIRS]}), path)
    return path


def _tsv(folder: Path) -> Path:
    path = folder / "pairs.tsv"
    pd.DataFrame({"en": [en for en, _ in PAIRS], "de": [de for _, de in PAIRS]}).to_csv(path, sep="\t", index=False)
    return path


LAYOUTS = {"Hub JSON Lines": (_hub_jsonl, HUB), "Translation feature, save_to_disk": (_translation_feature, HUB),
           "parquet struct": (_parquet_struct, HUB), "TSV with the header en de": (_tsv, ("en", "de"))}


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_layout_gives_the_pairs_in_order(layout, streaming, tmp_path):
    write, columns = LAYOUTS[layout]
    data = load_text_dataset(write(tmp_path), columns=pair_columns(*columns), streaming=streaming)
    assert [(row["source"], row["target"]) for row in pairs(data, *columns)] == PAIRS


@pytest.mark.parametrize("streaming", [False, True])
def test_a_pair_without_its_target_entry_is_refused_naming_file_line_and_entry(streaming, tmp_path):
    path = tmp_path / "wmt.jsonl"
    rows = [{"translation": {"de": de, "en": en}} for en, de in PAIRS[:3]] + [{"translation": {"en": "ten"}}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with pytest.raises(MissingColumnError, match=r"wmt\.jsonl: line 4 \(JSON Lines, column 'translation\.de'\): the "
                                                 r"row has no value for column 'translation\.de'"):
        list(load_text_dataset(path, columns=pair_columns(*HUB), streaming=streaming))


def test_a_language_the_pairs_lack_is_refused_naming_the_entries_they_hold(tmp_path):
    with pytest.raises(UnknownColumnError, match=r"no column 'translation\.fr'; column 'translation' holds the "
                                                 r"entries translation\.de, translation\.en"):
        load_text_dataset(_translation_feature(tmp_path), columns=pair_columns("translation.en", "translation.fr"))


def test_entries_of_a_column_of_strings_are_refused(tmp_path):
    path = tmp_path / "flat.jsonl"
    path.write_text(json.dumps({"translation": "Hello"}) + "\n", encoding="utf-8")
    with pytest.raises(UnknownColumnError, match=r"column 'translation' holds no named entries"):
        load_text_dataset(path, columns=pair_columns(*HUB))


def test_a_saved_dataset_read_by_entries_gains_no_file(tmp_path):
    saved = _translation_feature(tmp_path)
    before = sorted(p.relative_to(saved) for p in saved.rglob("*"))
    load_text_dataset(saved, columns=pair_columns(*HUB))
    assert sorted(p.relative_to(saved) for p in saved.rglob("*")) == before


def _train(source: Path, output_dir: Path, *extra: str) -> tuple[dict, Path]:
    return train_translation.main(["--recipe", "rnn-translation-tiny", "--train_file", str(source), "--max_steps",
                                   "2", "--save_steps", "0", "--progress_bar", "false", "--report_to", "none",
                                   "--tokenizer_vocab_size", "300", "--output_dir", str(output_dir), *extra])


@pytest.mark.parametrize("streaming", ["false", "true"])
def test_train_translation_and_evaluate_read_the_hubs_layout(streaming, tmp_path):
    data = _hub_jsonl(tmp_path)
    results, folder = _train(data, tmp_path / "run", "--source_column", HUB[0], "--target_column", HUB[1],
                             "--streaming", streaming)
    assert results["steps"] == 2
    assert "source_column: translation.en" in (folder / "recipe.yaml").read_text()
    out = evaluate.main(["--model", str(folder), "--dataset", str(data), "--source_column", HUB[0],
                         "--target_column", HUB[1], "--eval_size", "4", "--num_beams", "1", "--max_new_tokens", "4",
                         "--output_dir", str(tmp_path / "eval")])
    report = json.loads((out / "results.json").read_text())
    assert sum(r["sentences"] for r in report["translation"]["bleu_by_length"]) == 4
    again = evaluate.main(["--model", str(folder), "--dataset", str(data), "--eval_size", "4", "--num_beams", "1",
                           "--max_new_tokens", "4", "--output_dir", str(tmp_path / "eval2")])  # the run's columns
    assert json.loads((again / "results.json").read_text())["scores"] == report["scores"]
    with pytest.raises(UnknownColumnError, match=r"no column 'source'.*--source_column and --target_column"):
        evaluate.main(["--model", str(folder), "--dataset", str(data), "--source_column", "source", "--output_dir",
                       str(tmp_path / "eval3")])


def test_the_columns_are_advised_by_name_when_the_data_has_other_ones(tmp_path):
    with pytest.raises(UnknownColumnError, match=r"no column 'source'.*recipe keys source_column and target_column"):
        _train(_hub_jsonl(tmp_path), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_pair_columns_are_refused_for_another_command():
    from train import finetune

    with pytest.raises(RecipeError, match=r"recipe key 'source_column' is read by train_translation only"):
        finetune.main(["--recipe", "bert-finetune-nli-tiny", "--source_column", "en"])


def test_the_wmt14_recipe_is_the_papers_and_reads_the_hubs_wmt14(tmp_path, monkeypatch):
    """`transformer-base-wmt14`: the paper's settings (section 5), and its data keys read `wmt/wmt14` (`de-en`) as an
    online load leaves it in the datasets cache, a `Translation` feature, validation split newstest2013; the run
    itself shrunk to a tiny model and 2 steps."""
    recipe = load_recipe("transformer-base-wmt14")
    assert (recipe.model, recipe.lr_scheduler, recipe.warmup_steps, recipe.learning_rate, recipe.max_steps) == (
        "transformer-base", "inverse_sqrt", 4000, 1.0, 100_000)
    assert (recipe.adam_beta2, recipe.adam_epsilon, recipe.label_smoothing, recipe.tokenizer_vocab_size) == (
        0.98, 1e-9, 0.1, 37000)
    assert (recipe.weight_decay, recipe.max_grad_norm, recipe.num_beams, recipe.average_last_checkpoints) == (
        0.0, 0.0, 4, 5)
    assert (recipe.beam_search, recipe.length_penalty) == ("gnmt", 0.6)  # section 6.1's decoding
    files = {}
    for split, rows in (("train", PAIRS), ("validation", PAIRS[:6]), ("test", PAIRS[6:10])):
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps({"translation": {"de": de, "en": en}}) + "\n" for en, de in rows))
    features = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    hub_dataset(tmp_path / "cache", "wmt/wmt14", "de-en", files, features)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    results, folder = train_translation.main([
        "--recipe", "transformer-base-wmt14", "--model", "transformer-tiny", "--tokenizer_vocab_size", "300",
        "--max_seq_length", "32", "--max_new_tokens", "8", "--per_device_train_batch_size", "8", "--max_steps", "2",
        "--warmup_steps", "1", "--save_steps", "0", "--average_last_checkpoints", "0", "--eval_steps", "0",
        "--progress_bar", "false", "--report_to", "none", "--output_dir", str(tmp_path / "run")])
    assert results["steps"] == 2 and "eval_bleu" in results
    recorded = (folder / "recipe.yaml").read_text()
    assert "dataset: wmt/wmt14" in recorded and "source_column: translation.en" in recorded
