"""The SQuAD site's files (train-v1.1.json, dev-v2.0.json: one JSON object of articles, paragraphs and questions),
plain or gzip, give the rows of the same questions as JSON Lines, in the Hub's squad columns, in memory and streamed,
and so do transformers' run_qa.py files (rows under "data"); bad files are refused naming the question, the same both
ways, before anything is cached; `finetune --task question-answering` and `lineage evaluate` read them."""

import gzip
import itertools
import json
import os
import re
from pathlib import Path

import datasets
import pytest
import yaml

from train import evaluate, finetune
from train.data.corpus import generate_records, task_features
from train.data.encoders import QAAnswerSpanError
from train.data.errors import MalformedRowError, MissingColumnError, UnknownColumnError
from train.data.files import load_text_dataset

datasets.disable_progress_bars()
COLUMNS = (("question", "text"), ("context", "text"), ("answers", "answers"))


def _questions(split: str, size: int, version: str = "v2.0") -> list[dict]:
    rows = generate_records("qa", split, size=size)
    return rows if version == "v2.0" else [r for r in rows if r["answers"]["text"]]  # v1.1: all answered


def _squad(rows: list[dict], version: str = "v2.0") -> dict:
    """`rows` as the SQuAD site ships them: articles by title, paragraphs by context, each key in its place."""
    articles = []
    for title, article in itertools.groupby(rows, key=lambda r: r["title"]):
        paragraphs = []
        for context, questions in itertools.groupby(article, key=lambda r: r["context"]):
            qas = []
            for row in questions:
                answers = [{"text": t, "answer_start": s} for t, s in zip(*row["answers"].values())]
                qa = {"question": row["question"], "id": row["id"], "answers": answers}
                if version == "v2.0":
                    qa["is_impossible"] = not answers
                    if not answers:  # what a crowdworker marked, which no model is scored on
                        qa["plausible_answers"] = [{"text": context[:9], "answer_start": 0}]
                qas.append(qa)
            paragraphs.append({"qas": qas, "context": context})
        articles.append({"title": title, "paragraphs": paragraphs})
    return {"version": "v2.0", "data": articles} if version == "v2.0" else {"data": articles, "version": "1.1"}


def _write(path: Path, document: dict, **dump) -> Path:
    with (gzip.open(path, "wt", encoding="utf-8") if path.suffix == ".gz" else open(path, "w", encoding="utf-8")) as f:
        json.dump(document, f, **dump)
    return path


def _hub_rows(rows: list[dict]) -> list[dict]:
    """`rows` in the columns of the Hub's squad / squad_v2, in its order."""
    return [{name: row[name] for name in task_features("qa")} for row in rows]


def _read(path: Path, streaming: bool, cache: Path) -> list[dict]:
    return list(load_text_dataset(path, "validation", columns=COLUMNS, streaming=streaming, cache_dir=str(cache)))


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("version", ["v1.1", "v2.0"])
def test_squad_files_give_the_rows_of_their_json_lines_file_in_memory_and_streamed(version, suffix, tmp_path, capsys):
    rows = _questions("validation", 30, version)
    squad = _write(tmp_path / f"dev-{version}{suffix}", _squad(rows, version))
    lines = tmp_path / "dev.jsonl"
    lines.write_text("".join(json.dumps(row) + "\n" for row in rows))
    expected = _hub_rows(list(load_text_dataset(lines, columns=COLUMNS)))
    capsys.readouterr()
    in_memory = load_text_dataset(squad, "validation", columns=COLUMNS, cache_dir=str(tmp_path / "cache"))
    assert list(in_memory) == expected and in_memory.features == task_features("qa")
    unanswered = sum(not row["answers"]["text"] for row in rows)
    articles = len(list(itertools.groupby(rows, key=lambda r: r["title"])))
    said = f"{squad}: SQuAD {version} layout, {len(rows)} questions of {articles} articles"
    said += f", {unanswered} without an answer\n" if version == "v2.0" else "\n"
    assert unanswered or version == "v1.1"
    assert capsys.readouterr().out.count(said) == 1
    streamed = load_text_dataset(squad, "validation", columns=COLUMNS, streaming=True)
    assert isinstance(streamed, datasets.IterableDataset) and streamed.num_shards == 1
    assert list(streamed) == expected and capsys.readouterr().out.count(said) == 1


@pytest.mark.parametrize("streaming", [False, True])
def test_run_qa_files_of_rows_under_data_give_the_same_rows(streaming, tmp_path, capsys):
    rows = _questions("validation", 12)
    path = _write(tmp_path / "dev.json", {"version": "v2.0", "data": rows}, indent=2)
    assert _read(path, streaming, tmp_path / "cache") == rows
    assert f"{path}: rows under 'data' (transformers' run_qa.py layout), 12 rows\n" in capsys.readouterr().out


def test_a_squad_file_is_cached_by_its_content(tmp_path):
    rows = _questions("validation", 9)
    path = _write(tmp_path / "dev-v2.0.json", _squad(rows))
    first = load_text_dataset(path, columns=COLUMNS, cache_dir=str(tmp_path / "cache"))
    assert load_text_dataset(path, columns=COLUMNS, cache_dir=str(tmp_path / "cache")).cache_files == first.cache_files
    stat = path.stat()
    path.write_text(path.read_text().replace(rows[4]["question"], rows[4]["question"].upper()))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same size and time: only the content tells
    again = load_text_dataset(path, columns=COLUMNS, cache_dir=str(tmp_path / "cache"))
    assert again[4]["question"] == rows[4]["question"].upper() and again.cache_files != first.cache_files


def _edit(document: dict, article: int, paragraph: int = 0, question: int | None = None) -> dict:
    """The part of `document` to spoil: a paragraph, or one of its questions."""
    part = document["data"][article]["paragraphs"][paragraph]
    return part if question is None else part["qas"][question]


HINT = r"; SQuAD's layout is \{\"data\": \[\{\"title\": \.\.\., \"paragraphs\""
BAD = {  # what is spoilt -> the refusal (the dev file's article 2 is Luca Petrov's, its questions validation-0-3..5)
    "context": (lambda d: _edit(d, 1).pop("context"),
                r"article 2 \('Luca Petrov'\), paragraph 1: no 'context' \(a string, the paragraph\)"
                + HINT, MalformedRowError),
    "question": (lambda d: _edit(d, 1, 0, 1).pop("question"),
                 r"article 2 \('Luca Petrov'\), paragraph 1, question 2 \(id 'validation-0-4'\): no 'question' \(a "
                 r"string\)" + HINT, MalformedRowError),
    "answer_start": (lambda d: _edit(d, 1, 0, 0)["answers"][0].update(answer_start="27"),
                     r"article 2 \('Luca Petrov'\), paragraph 1, question 1 \(id 'validation-0-3'\): answer 1: "
                     r"'answer_start' is a str \('27'\), but must be an integer, the character of the context its "
                     r"text starts at" + HINT, MalformedRowError),
    "qas": (lambda d: _edit(d, 1).update(qas=_edit(d, 1)["qas"][0]),
            r"article 2 \('Luca Petrov'\), paragraph 1: 'qas' is a dict \(\{.*\}\), but must be a list of questions"
            + HINT, MalformedRowError),
    "blank question": (lambda d: _edit(d, 1, 0, 2).update(question="  "),
                       r"article 2 \('Luca Petrov'\), paragraph 1, question 3 \(id 'validation-0-5', column "
                       r"'question'\): the row has no value for column 'question' \(only whitespace\); fill it in or "
                       r"remove the row$", MissingColumnError),
}


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("spoilt", BAD)
def test_a_bad_squad_file_is_refused_naming_the_question_the_same_in_memory_and_streamed(spoilt, suffix, tmp_path):
    document = _squad(_questions("validation", 12))
    spoil, message, error = BAD[spoilt]
    spoil(document)
    path = _write(tmp_path / f"dev-v2.0{suffix}", document)
    for streaming in (False, True):
        with pytest.raises(error, match=f"^{re.escape(str(path))}: {message}"):
            _read(path, streaming, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_malformed_json_is_refused_naming_its_line_and_column(tmp_path):
    text = json.dumps(_squad(_questions("validation", 12)), indent=1).replace('"is_impossible": false', "nope", 1)
    path = tmp_path / "dev-v2.0.json"
    path.write_text(text)
    at = text.index("nope")
    line, column = text.count("\n", 0, at) + 1, at - text.rindex("\n", 0, at)
    for streaming in (False, True):
        with pytest.raises(MalformedRowError, match=rf"dev-v2\.0\.json: line {line}, column {column}: not valid JSON "
                                                    r"\(Expecting property name enclosed in double quotes\)$"):
            _read(path, streaming, tmp_path / "cache")


def test_squad_files_with_files_of_another_layout_or_other_columns_are_refused(tmp_path):
    rows = _questions("validation", 12)
    folder = tmp_path / "data"
    folder.mkdir()
    _write(folder / "a.json", _squad(rows[:6]))
    (folder / "b.json").write_text("".join(json.dumps(row) + "\n" for row in rows[6:]))
    with pytest.raises(MalformedRowError, match=r"data/b\.json holds a row per JSON object \(JSON Lines or a JSON "
                                                r"array\), but .*data/a\.json holds SQuAD's articles: read the files "
                                                r"of each layout separately"):
        load_text_dataset(folder, columns=COLUMNS)
    with pytest.raises(UnknownColumnError, match=r"a\.json: article 1 \('Anna Lindqvist'\), paragraph 1, question 1: "
                                                 r"no column 'query'; the dataset has columns \['id', 'title', "
                                                 r"'context', 'question', 'answers'\]"):
        load_text_dataset(folder / "a.json", columns=("query",))


def _finetune(train: Path, validation: Path, out: Path, *extra: str) -> tuple[dict, Path]:
    return finetune.main(["--recipe", "bert-finetune-nli-tiny", "--task", "question-answering", "--train_file",
                          str(train), "--validation_file", str(validation), "--max_query_length", "32", "--max_steps",
                          "3", "--save_steps", "0", "--progress_bar", "false", "--output_dir", str(out), *extra])


def test_finetune_and_evaluate_read_the_squad_sites_files(tmp_path, capsys):
    train = _write(tmp_path / "train-v2.0.json.gz", _squad(_questions("train", 60)))
    dev_rows = _questions("validation", 15)
    dev = _write(tmp_path / "dev-v2.0.json", _squad(dev_rows))
    results, folder = _finetune(train, dev, tmp_path / "qa")
    assert 0 <= results["eval_exact_match"] <= 1 and 0 <= results["eval_f1"] <= 1 and results["train_rows"] == 60
    said = capsys.readouterr().out
    assert said.count(f"{train}: SQuAD v2.0 layout, 60 questions of 20 articles") == 1
    assert said.count(f"{dev}: SQuAD v2.0 layout, 15 questions of 5 articles") == 1
    out = evaluate.main(["--model", str(folder), "--dataset", str(dev), "--batch_size", "32", "--output_dir",
                         str(tmp_path / "eval")])
    report = json.loads((out / "results.json").read_text())
    figures = report["scores"]["question-answering"]
    assert (figures["exact_match"], figures["f1"]) == (results["eval_exact_match"], results["eval_f1"])
    assert report["data"]["rows"] == 15 and capsys.readouterr().out.count(f"{dev}: SQuAD v2.0 layout") == 1
    results, _ = _finetune(train, dev, tmp_path / "streamed", "--streaming", "true")
    assert results["steps"] == 3
    document = _squad(dev_rows)
    answer = _edit(document, 1, 0, 1)["answers"][0]
    answer["answer_start"] += 1  # the text no longer where it starts: refused as in a JSON Lines file
    bad = _write(tmp_path / "bad-v2.0.json", document)
    where = re.escape(f"{bad}: article 2 ('Luca Petrov'), paragraph 1, question 2 (column 'answers') (id "
                      f"'validation-0-4'): answer {answer['text']!r} does not match the context at character "
                      f"{answer['answer_start']}")
    with pytest.raises(QAAnswerSpanError, match=where):
        _finetune(train, bad, tmp_path / "refused")
    with pytest.raises(QAAnswerSpanError, match=where):
        evaluate.main(["--model", str(folder), "--dataset", str(bad), "--output_dir", str(tmp_path / "eval2")])


def test_the_bert_base_squad_recipe_runs_on_the_squad_sites_files_with_its_windows(tmp_path):
    """The shipped recipe (BERT's SQuAD v1.1 settings) on v1.1 files, its pretrained model swapped for a tiny one of
    512 positions: windows of 384 tokens, questions cut to 64, warmup over a tenth of the steps, as recipe.yaml says."""
    questions = _questions("train", 40, "v1.1")
    train = _write(tmp_path / "train-v1.1.json", _squad(questions, "v1.1"))
    dev = _write(tmp_path / "dev-v1.1.json", _squad(_questions("validation", 10, "v1.1"), "v1.1"))
    results, folder = finetune.main([
        "--recipe", "bert-base-squad", "--model", "bert-tiny", "--model_overrides", "{max_position_embeddings: 512}",
        "--train_file", str(train), "--validation_file", str(dev), "--per_device_train_batch_size", "8",
        "--num_train_epochs", "1", "--save_steps", "0", "--progress_bar", "false",
        "--output_dir", str(tmp_path / "qa")])
    assert results["steps"] == -(-len(questions) // 8)  # a window a question: each context fits in 384 tokens
    assert 0 <= results["eval_exact_match"] <= 1
    recipe = yaml.safe_load((folder / "recipe.yaml").read_text())
    assert (recipe["task"], recipe["max_seq_length"], recipe["max_query_length"], recipe["warmup_ratio"],
            recipe["learning_rate"]) == ("question-answering", 384, 64, 0.1, 5e-5)


def _without_answers(document: dict) -> dict:
    """`document` as a test set ships: its questions with no 'answers' (nor v2.0's is_impossible and plausible ones)."""
    for article in document["data"]:
        for paragraph in article["paragraphs"]:
            paragraph["qas"] = [{k: v for k, v in qa.items() if k in ("id", "question")} for qa in paragraph["qas"]]
    return document


@pytest.mark.parametrize("streaming", [False, True])
def test_a_squad_test_set_without_answers_gives_its_rows_without_the_column(streaming, tmp_path, capsys):
    """The questions of a file without answers are read without the column (the Hub's squad features but 'answers'),
    said so; a task that reads answers is refused naming the column; a file answering some questions but not others,
    or a test set read with files of answers, is refused naming both."""
    rows = _questions("validation", 12)
    test = _write(tmp_path / "test-v2.0.json", _without_answers(_squad(rows)))
    columns = COLUMNS[:2]
    read = load_text_dataset(test, "test", columns=columns, streaming=streaming, cache_dir=str(tmp_path / "cache"))
    assert list(read) == [{k: v for k, v in row.items() if k != "answers"} for row in _hub_rows(rows)]
    assert dict(read.features) == {k: v for k, v in task_features("qa").items() if k != "answers"}
    said = capsys.readouterr().out
    assert f"{test}: SQuAD v2.0 layout, 12 questions of 4 articles, no answers (a test set)\n" in said
    with pytest.raises(UnknownColumnError, match=re.escape(f"{test}: article 1 ({rows[0]['title']!r}), paragraph 1, "
                                                           f"question 1: no column 'answers'; the dataset has columns "
                                                           f"['id', 'title', 'context', 'question']")):
        load_text_dataset(test, columns=COLUMNS, streaming=streaming, cache_dir=str(tmp_path / "cache"))
    some = _squad(rows)
    _edit(some, 1, 0, 1).pop("answers")
    mixed = _write(tmp_path / "mixed-v2.0.json", some)
    with pytest.raises(MalformedRowError, match=re.escape(
            f"{mixed}: article 2 ('Luca Petrov'), paragraph 1, question 2: no 'answers', but {mixed}: article 1 "
            f"({rows[0]['title']!r}), paragraph 1, question 1 has them: a file's questions all have answers (a "
            f"training or dev set) or none (a test set)")):
        load_text_dataset(mixed, columns=columns, streaming=streaming, cache_dir=str(tmp_path / "cache"))
    dev = _write(tmp_path / "dev-v2.0.json", _squad(rows))
    with pytest.raises(MalformedRowError, match=re.escape(f"{test}'s questions have no answers, but {dev}'s have: read "
                                                          f"a test set apart from the files with answers")):
        load_text_dataset([dev, test], columns=columns, streaming=streaming, cache_dir=str(tmp_path / "cache"))


def test_lineage_evaluate_predicts_a_squad_test_set_as_the_same_questions_with_answers(tmp_path):
    """`lineage evaluate --predictions` on the SQuAD site's layout without answers writes the answers of the same
    questions with them (predictions.json keyed by id, for the official script), no figure."""
    _, folder = _finetune(_write(tmp_path / "train-v2.0.json", _squad(_questions("train", 40))),
                          _write(tmp_path / "dev-v2.0.json", _squad(_questions("validation", 12))), tmp_path / "qa")
    rows = _questions("test", 12)
    common = ["--model", str(folder), "--predictions", "true"]
    scored = evaluate.main([*common, "--dataset", str(_write(tmp_path / "answered.json", _squad(rows))),
                            "--output_dir", str(tmp_path / "a")])
    alone = evaluate.main([*common, "--dataset", str(_write(tmp_path / "test.json", _without_answers(_squad(rows)))),
                           "--output_dir", str(tmp_path / "b")])
    assert json.loads((alone / "predictions.json").read_text()) == json.loads((scored / "predictions.json").read_text())
    assert json.loads((alone / "results.json").read_text())["scores"] == {}
    assert len(json.loads((alone / "predictions.json").read_text())) == len(rows)
