"""The SQuAD site's JSON files (train-v1.1.json, dev-v2.0.json, ...), plain or compressed: one JSON object of
articles, paragraphs and questions, read whole into a row per question as the Hub's squad / squad_v2 give it (id,
title, context, question, answers; a v2 question without an answer has empty lists, plausible_answers are dropped;
a test set, no 'answers' at all, no such column);
also transformers' run_qa.py layout, rows under "data". Checked before any row is used, the same in memory and
streamed, naming the question. docs/training.md, "Data".
"""

from __future__ import annotations

import itertools
import json
import re
import reprlib
from collections.abc import Iterator
from pathlib import Path

import datasets

from train.data.corpus import task_features
from train.data.errors import EmptyDataFileError, MalformedRowError, UnknownColumnError
from train.data.file_bytes import check_utf8, chunks
from train.data.files import AnyDataset, is_bad, validate_files, value_error, value_of, with_columns
from train.data.fingerprints import files_digest

LAYOUT = ('SQuAD\'s layout is {"data": [{"title": ..., "paragraphs": [{"context": ..., "qas": [{"id": ..., '
          '"question": ..., "answers": [{"text": ..., "answer_start": int}]}]}]}]}')

LAYOUTS = {True: "SQuAD's articles", False: "rows under 'data' (run_qa.py's layout)",
           None: "a row per JSON object (JSON Lines or a JSON array)"}  # a JSON file's, by `_is_squad`

_HEAD = re.compile(r'\s*\{\s*"(?:version|data)"\s*:')  # how such a file starts


def _head(path: Path) -> str:
    return next(chunks(path, 1 << 16), b"").decode("utf-8", errors="ignore").removeprefix("\ufeff")


def holds_data(path: Path) -> bool:
    """Whether `path` may be one JSON object of "version" and "data" (not JSON Lines, whose first line is a row)."""
    head = _head(path)
    if not _HEAD.match(head):
        return False
    first, _, rest = head.lstrip().partition("\n")
    try:
        json.loads(first)
    except json.JSONDecodeError:
        return True  # the object goes on past its first line
    return not rest.strip()


def _document(path: Path) -> dict | None:
    """The file's one JSON object, where it holds a list "data" (None: JSON Lines, or another object)."""
    if not holds_data(path):
        return None
    try:
        text = b"".join(chunks(path)).decode("utf-8-sig")
    except UnicodeDecodeError:
        check_utf8(path)
        raise
    try:
        document, end = json.JSONDecoder().raw_decode(text, len(text) - len(text.lstrip()))
    except json.JSONDecodeError as err:
        raise MalformedRowError(f"{path}: line {err.lineno}, column {err.colno}: not valid JSON ({err.msg})") from None
    return document if not text[end:].strip() and isinstance(document.get("data"), list) else None


def _is_squad(document: dict) -> bool:
    """Whether `document["data"]` holds SQuAD's articles (else run_qa.py's rows)."""
    data = document["data"]
    return bool(data) and isinstance(data[0], dict) and "paragraphs" in data[0]


def _a(value: object) -> str:
    name = type(value).__name__
    return "null" if value is None else f"{'an' if name[0] in 'aeiou' else 'a'} {name} ({reprlib.repr(value)})"


def _get(item: dict, key: str, kind: type, where: str, what: str):
    """`item[key]`, refused unless it is a `kind`."""
    if key not in item:
        raise MalformedRowError(f"{where}: no {key!r} ({what}); {LAYOUT}")
    value = item[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedRowError(f"{where}: {key!r} is {_a(value)}, but must be {what}; {LAYOUT}")
    return value


def _object(item: object, where: str, what: str) -> dict:
    if not isinstance(item, dict):
        raise MalformedRowError(f"{where} is {_a(item)}, not an object of {what}; {LAYOUT}")
    return item


def _squad_questions(path: Path, data: list) -> Iterator[tuple[str, dict]]:
    """`(where, row)` of each question of SQuAD's articles `data`, in order, each level checked as it is reached."""
    for a, article in enumerate(data, 1):
        where = f"{path}: article {a}"
        article = _object(article, where, "'title' and 'paragraphs'")
        title = _get(article, "title", str, where, "a string") if "title" in article else ""
        where += f" ({title!r})" if title else ""
        for p, paragraph in enumerate(_get(article, "paragraphs", list, where, "a list of paragraphs"), 1):
            at = f"{where}, paragraph {p}"
            paragraph = _object(paragraph, at, "'context' and 'qas'")
            context = _get(paragraph, "context", str, at, "a string, the paragraph")
            for q, qa in enumerate(_get(paragraph, "qas", list, at, "a list of questions"), 1):
                place = f"{at}, question {q}"
                qa = _object(qa, place, "'id', 'question' and 'answers'")
                named = f"{place} (id {_get(qa, 'id', str, place, 'a string')!r})"
                row = {"id": qa["id"], "title": title, "context": context,
                       "question": _get(qa, "question", str, named, "a string")}
                if "answers" in qa:  # a test set's questions have none
                    row["answers"] = _answers(_get(qa, "answers", list, named, "a list of answers"), named)
                yield place, row


def _answers(answers: list, named: str) -> dict[str, list]:
    texts, starts = [], []
    for n, answer in enumerate(answers, 1):
        answer = _object(answer, f"{named}: answer {n}", "'text' and 'answer_start'")
        texts.append(_get(answer, "text", str, f"{named}: answer {n}", "a string"))
        starts.append(_get(answer, "answer_start", int, f"{named}: answer {n}",
                           "an integer, the character of the context its text starts at"))
    return {"text": texts, "answer_start": starts}


def _rows_of(path: Path, document: dict) -> Iterator[tuple[str, dict]]:
    """`(where, row)` of each row of the file: SQuAD's questions, or the rows of run_qa.py's layout."""
    if _is_squad(document):
        yield from _squad_questions(path, document["data"])
        return
    for n, row in enumerate(document["data"], 1):
        yield f"{path}: row {n} of 'data'", _object(row, f"{path}: row {n} of 'data'", "columns")


def _check(path: Path, document: dict, kinds: dict[str, str | None]) -> bool:
    """Refuse a file whose rows lack a column of `kinds` or hold a value `files.is_bad` refuses, or whose questions
    have answers but for some; say its counts; whether its questions have answers (run_qa.py's rows: True)."""
    squad, count, unanswered, first = _is_squad(document), 0, 0, None
    for where, row in _rows_of(path, document):
        count += 1
        first = first or (where, "answers" in row)
        if squad and ("answers" in row) != first[1]:
            with_, without = (first[0], where) if first[1] else (where, first[0])
            raise MalformedRowError(f"{without}: no 'answers', but {with_} has them: a file's questions all have "
                                    f"answers (a training or dev set) or none (a test set); {LAYOUT}")
        missing = [c for c in kinds if c not in row and c.split(".", 1)[0] not in row]
        if missing:
            raise UnknownColumnError(f"{where}: no column {missing[0]!r}; the dataset has columns {list(row)}")
        for column, kind in kinds.items():
            if is_bad(value := value_of(row, column), kind, records=True):
                named = f"id {row['id']!r}, " if "id" in row else ""
                raise value_error(f"{where} ({named}column {column!r})", column, kind, value)
        unanswered += squad and first[1] and not row["answers"]["text"]
    if not count:
        raise EmptyDataFileError(f"{path}: its 'data' holds no {'questions' if squad else 'rows'}")
    version = str(document.get("version", "")).removeprefix("v")
    answers = f", {unanswered} without an answer" if unanswered else "" if first[1] else ", no answers (a test set)"
    said = (f"SQuAD {'v' + version + ' ' if version else ''}layout, {count} questions of {len(document['data'])} "
            f"articles{answers}" if squad else f"rows under 'data' (transformers' run_qa.py layout), {count} rows")
    print(f"{path}: {said}", flush=True)
    return not squad or first[1]


def _rows(shards: list[list[str]]) -> Iterator[dict]:
    for files in shards:
        for path in files:
            yield from (row for _, row in _rows_of(Path(path), _document(Path(path))))


def load_data_files(files: list[Path], split: str, kinds: dict[str, str | None], streaming: bool,
                    cache_dir: str | None) -> AnyDataset | None:
    """JSON `files` of one object holding "data" (SQuAD's or run_qa.py's) checked whole, as one split: in memory
    (Arrow, cached by the files' content) or a stream of one shard; None where they are not such files."""
    validate_files(files, "text")
    documents = [_document(path) for path in files]
    if not any(documents):
        return None
    layouts = [LAYOUTS[d and _is_squad(d)] for d in documents]
    odd = next((path for path, layout in zip(files, layouts) if layout != layouts[0]), None)
    if odd is not None:
        raise MalformedRowError(f"{odd} holds {layouts[files.index(odd)]}, but {files[0]} holds {layouts[0]}: read "
                                f"the files of each layout separately")
    answered = [_check(path, document, kinds) for path, document in zip(files, documents)]
    if len(set(answered)) > 1:
        raise MalformedRowError(f"{files[answered.index(False)]}'s questions have no answers, but "
                                f"{files[answered.index(True)]}'s have: read a test set apart from the files with "
                                f"answers")
    features = None  # run_qa.py's rows as they are; SQuAD's as the Hub's squad's, 'answers' where they have them
    if _is_squad(documents[0]):
        features = datasets.Features({k: v for k, v in task_features("qa").items() if answered[0] or k != "answers"})
    names = [str(path) for path in files]
    if streaming:
        dataset = datasets.IterableDataset.from_generator(_rows, features=features, gen_kwargs={"shards": [names]})
    else:
        dataset = datasets.Dataset.from_generator(_rows, features=features, cache_dir=cache_dir, split=split,
                                                  gen_kwargs={"shards": [names]},
                                                  fingerprint=f"squad-{split}-{files_digest(files)}")
    return with_columns(dataset, list(kinds), str(files[0]))


def question_location(path: Path, row: int, column: str | None = None) -> str | None:
    """Where row `row` (0-based) of such a file is: its article, paragraph and question; None for another file."""
    document = _document(path)
    where = next(itertools.islice(_rows_of(path, document), row, None), (None,))[0] if document else None
    return where and f"{where}{f' (column {column!r})' if column else ''}"
