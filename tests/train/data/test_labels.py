"""Class labels of a streamed training split (`streamed_class_labels`): the classes its features declare, the same ones
required of the validation split, rows labelled -1 left out of both with `skip_unlabeled`, and a stream that declares
no classes refused naming the file and the column; integer ids read whole (`class_labels`): a validation id the
training split never shows refused, ids (or declared classes) the training split leaves out said, and a validation
split of one class among several trained said, with the likely cause (a split sorted by label, cut); booleans as
pandas writes them, the classes False and True. Scores
(`score_labels`, the task regression): any real number kept as it is, text and infinity refused naming the row and
value, in memory and as a stream is read, rows labelled -1 or without a score (null, empty, NaN) left out on request,
else refused naming skip_unlabeled. Bad labels read whole:
tests/train/data/test_bad_data.py."""

import math

import datasets
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from train.data.labels import LabelError, class_labels, score_labels, streamed_class_labels

NAMES = ["neg", "pos", "neutral"]


def _split(labels: list[int], names: list[str] | None = NAMES) -> datasets.Dataset:
    label = datasets.ClassLabel(names=names) if names else datasets.Value("int64")
    features = datasets.Features({"text": datasets.Value("string"), "label": label})
    return datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(len(labels))], "label": labels}, features)


def _scores(labels: list, feature: str | None = "float64") -> datasets.Dataset:
    """A split of these labels, stored as `feature` (None: the type Arrow reads them as)."""
    features = None if feature is None else datasets.Features({"text": datasets.Value("string"),
                                                               "label": datasets.Value(feature)})
    return datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(len(labels))], "label": labels}, features)


@pytest.mark.parametrize("skip_unlabeled", [False, True])
def test_the_declared_classes_and_every_row_or_the_labelled_ones(skip_unlabeled):
    labels = [0, -1, 2, 1, -1, 0] if skip_unlabeled else [0, 2, 1, 0]  # -1 without skip_unlabeled: refused, below
    names, train, validation = streamed_class_labels(_split(labels).to_iterable_dataset(), _split(labels[::-1]),
                                                     "label", ("train.jsonl", "dev.jsonl"), skip_unlabeled)
    assert names == NAMES
    kept = [v for v in labels if v != -1] if skip_unlabeled else labels
    assert [row["label"] for row in train] == kept and [row["label"] for row in validation] == kept[::-1]


def test_a_stream_that_declares_no_classes_is_refused_naming_file_and_column():
    with pytest.raises(LabelError, match="train.jsonl declares no classes for column 'label'"):
        streamed_class_labels(_split([0, 1], None).to_iterable_dataset(), None, "label", ("train.jsonl", "dev.jsonl"))


def test_validation_declaring_other_classes_is_refused():
    with pytest.raises(LabelError, match=r"dev.jsonl declares \['a', 'b'\]"):
        streamed_class_labels(_split([0, 1]).to_iterable_dataset(), _split([0, 1], ["a", "b"]), "label",
                              ("train.jsonl", "dev.jsonl"))


def test_an_integer_class_the_training_split_never_shows_is_refused_in_the_validation_split():
    """The id lies within the training ids' range (0 to 2) but no training row has it."""
    with pytest.raises(LabelError, match=r"dev.jsonl: .*label 1 never occurs in the training data \(train.jsonl: "
                                         r"\{0: 2, 2: 2\}\)"):
        class_labels(_split([0, 2, 2, 0], None), _split([2, 1], None), "label", ("train.jsonl", "dev.jsonl"))


def test_integer_ids_the_training_split_leaves_out_become_untrained_classes_and_are_said(capsys):
    names, train, validation = class_labels(_split([1, 5, 3, 2, 4, 5], None), _split([4, 1], None), "label",
                                            ("stars.csv", "dev.csv"))
    assert names == [str(i) for i in range(6)]
    assert train["label"] == [1, 5, 3, 2, 4, 5] and validation["label"] == [4, 1]
    said = capsys.readouterr().out
    assert "stars.csv: column 'label' never shows class id 0: integer labels are class ids, so the model gets 6 " \
           "classes, 0 to 5, 1 of them never trained" in said
    class_labels(_split([0, 2, 1], None), None, "label", ("train.csv", "dev.csv"))
    class_labels(_split([1, 5], None), None, "label", ("eval.csv", "eval.csv"), training=False)
    assert capsys.readouterr().out == ""


def test_an_unlabelled_row_of_a_stream_is_refused_as_it_is_read_naming_the_way_out():
    """Without `skip_unlabeled` a -1 of the stream is refused when the row is read (it was a loss's IndexError), and
    the validation split's before training, as in memory."""
    names, train, _ = streamed_class_labels(_split([0, 1, -1, 2]).to_iterable_dataset(), None, "label",
                                            ("train.jsonl", "dev.jsonl"))
    rows = iter(train)
    assert [next(rows)["label"] for _ in range(2)] == [0, 1]
    with pytest.raises(LabelError, match=r"train.jsonl: row 2.*label -1 is not a class id >= 0 \(an unlabelled row.*"
                                         r"skip_unlabeled: true"):
        next(rows)
    with pytest.raises(LabelError, match=r"dev.jsonl: row 1.*label -1 is not a class id >= 0"):
        streamed_class_labels(_split([0, 1]).to_iterable_dataset(), _split([2, -1]), "label",
                              ("train.jsonl", "dev.jsonl"))


@pytest.mark.parametrize("streaming", [False, True])
def test_a_validation_split_of_unlabelled_rows_alone_is_refused_not_scored_as_nothing(streaming, capsys):
    """Streamed too: its validation split is read whole, so its rows labelled -1 are counted as in memory (before: left
    out silently, and a split of no other row left empty)."""
    labels = (streamed_class_labels if streaming else class_labels)
    train = _split([0, 1, 2, 1])
    train = train.to_iterable_dataset() if streaming else train
    _, _, validation = labels(train, _split([-1, 2, -1]), "label", ("train.jsonl", "dev.jsonl"), skip_unlabeled=True)
    assert validation["label"] == [2]
    assert "dev.jsonl: skipped 2 rows labelled -1 in column 'label' (skip_unlabeled)" in capsys.readouterr().out
    with pytest.raises(LabelError, match=r"dev.jsonl: every row is labelled -1 in column 'label'.*nothing to "
                                         r"evaluate on"):
        labels(train, _split([-1, -1]), "label", ("train.jsonl", "dev.jsonl"), skip_unlabeled=True)


def test_whole_scores_stored_as_floats_become_class_ids_and_are_said_so(capsys):
    """A float column of whole numbers (STS-B-like scores 0.0-5.0, or ids Arrow widened) is read as class ids, which
    a regression task would not want: the run says so."""
    scores = datasets.Dataset.from_dict({"text": ["a", "b", "c"], "label": [0.0, 5.0, 3.0]},
                                        datasets.Features({"text": datasets.Value("string"),
                                                           "label": datasets.Value("float32")}))
    names, train, _ = class_labels(scores, None, "label", ("stsb.jsonl", "dev.jsonl"))
    assert names == [str(i) for i in range(6)] and train["label"] == [0, 5, 3]
    assert "column 'label' holds whole numbers stored as floats: read as class ids (for scores, such as STS-B's 0 to " \
           "5, set task: regression)" in capsys.readouterr().out


def test_a_fractional_score_under_a_classification_task_is_refused_naming_the_regression_task():
    with pytest.raises(LabelError, match=r"stsb.jsonl: row 1, column 'label': label 3.8 is not a class: .*\(got "
                                         r"float; for scores such as 3.8, set task: regression\)"):
        class_labels(_scores([1.0, 3.8]), None, "label", ("stsb.jsonl", "dev.jsonl"))


SCORES = st.lists(st.one_of(st.floats(-1e6, 1e6), st.integers(-5, 5)), min_size=1, max_size=20)


@settings(max_examples=25, deadline=None, database=None, derandomize=True)
@given(SCORES, st.booleans(), st.booleans())
def test_any_real_scores_are_kept_as_they_are_and_skip_unlabeled_leaves_out_the_rows_labelled_minus_1(labels, skip,
                                                                                                       streamed):
    labels = [float(v) for v in labels]
    kept = [v for v in labels if v != -1] if skip else labels
    if all(v == -1 for v in kept):  # no score left to learn: refused, below
        return
    train = _scores(labels).to_iterable_dataset() if streamed else _scores(labels)
    train, validation = score_labels(train, _scores(labels[::-1]), "label", ("train.csv", "dev.csv"), skip)
    assert [row["label"] for row in train] == kept and list(validation["label"]) == kept[::-1]


TEXT = ["0.5", "1.5", "n/a", "2"]  # a CSV column with one word among numbers: Arrow reads all of it as text


@pytest.mark.parametrize("labels, row, refusal, streamed_row, streamed_refusal", [
    ([0.5, 1.0, math.inf], 2, "label inf is not a finite number", 2, None),
    (TEXT, 2, "label 'n/a' is text, not a number", 0, "label '0.5' is a number written as text"),  # memory names the
    (["0.5", "1.5"], 0, "label '0.5' is a number written as text", 0, None),  # word; a stream meets row 0 first
    (["0.5", "NaN"], 1, "label 'NaN' is not a finite number", 0, "label '0.5' is a number written as text"),
])
def test_a_label_that_is_no_real_number_is_refused_naming_its_row_and_value(labels, row, refusal, streamed_row,
                                                                            streamed_refusal):
    data = _scores(labels, None)
    for split, where in ((data, row), (data.to_iterable_dataset(), streamed_row)):
        said = refusal if split is data else streamed_refusal or refusal
        with pytest.raises(LabelError, match=rf"train.csv: row {where}, column 'label': {said}.*the task regression "
                                             r"takes a real number per row"):
            list(score_labels(split, None, "label", ("train.csv", "dev.csv"))[0])
    with pytest.raises(LabelError, match=rf"dev.csv: row {row}, column 'label': {refusal}"):  # read whole
        score_labels(_scores([1.0, 2.0]).to_iterable_dataset(), data, "label", ("train.csv", "dev.csv"))


@pytest.mark.parametrize("missing, held", [(None, "null, or an empty or blank field"), ("", "an empty string"),
                                           (" ", "only whitespace"), (math.nan, "NaN")])
def test_a_row_without_a_score_is_unlabelled_refused_naming_skip_unlabeled_or_left_out_with_it(missing, held, capsys):
    """A score column's missing value (null, an empty or blank string, NaN: pandas' missing value) is the unlabelled
    form of a score, as -1 is: refused naming the row and `skip_unlabeled`, which leaves it out with the rows labelled
    -1, counted; in memory and as a stream is read."""
    labels = [0.5, missing, -1.0, 2.0]
    feature = datasets.Json() if isinstance(missing, str) else datasets.Value("float64")  # text among numbers: JSON's
    data = datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(4)], "label": labels},
                                      datasets.Features({"text": datasets.Value("string"), "label": feature}))
    for split in (data, data.to_iterable_dataset()):
        with pytest.raises(LabelError, match=rf"^train.csv: row 1, column 'label': the row has no score \({held}\): a "
                                             r"row without a score is unlabelled; set skip_unlabeled: true to skip "
                                             r"such rows, or give it a score$"):
            list(score_labels(split, None, "label", ("train.csv", "dev.csv"))[0])
        train, validation = score_labels(split, data, "label", ("train.csv", "dev.csv"), skip_unlabeled=True)
        assert [row["label"] for row in train] == [0.5, 2.0] and list(validation["label"]) == [0.5, 2.0]
    assert "train.csv: skipped 2 rows labelled -1 or without a score in column 'label' (skip_unlabeled)" in \
        capsys.readouterr().out


@pytest.mark.parametrize("scores", [True, False])
def test_a_stream_that_skip_unlabeled_leaves_without_a_row_is_refused_naming_the_cause(scores):
    """Every row labelled -1 (a GLUE test split; scores also without a score): refused when the labels are checked,
    before a tokenizer is trained on nothing (before: `train_tokenizer got no non-empty text`, or `the training stream
    yielded no example`)."""
    stream = (_scores([-1.0, None]) if scores else _split([-1, -1])).to_iterable_dataset()
    unlabelled = "labelled -1 or without a score" if scores else "labelled -1"
    with pytest.raises(LabelError, match=rf"^train.jsonl: every row is {unlabelled} in column 'label' \(unlabelled, "
                                         r"as GLUE's test splits\), so skip_unlabeled leaves the stream nothing to "
                                         r"train on"):
        (score_labels if scores else streamed_class_labels)(stream, None, "label", ("train.jsonl", "dev.jsonl"), True)


def test_a_split_of_unlabelled_rows_alone_is_refused_with_or_without_skip_unlabeled():
    """GLUE's stsb test split is labelled -1.0 throughout: no score to learn or to evaluate on."""
    for skip in (False, True):
        with pytest.raises(LabelError, match=r"test.csv: every row is labelled -1( or without a score)? in column "
                                             r"'label' \(unlabelled, as GLUE's test splits\)"):
            score_labels(_scores([1.5, -1.0]), _scores([-1.0, -1.0]), "label", ("train.csv", "test.csv"), skip)


@pytest.mark.parametrize("names", [NAMES, None])
def test_a_validation_split_of_one_class_among_several_trained_is_said_with_the_likely_cause(names, capsys):
    """IMDB's splits are sorted by label: the first rows of its test split are all negative, so figures on them score
    one class (accuracy is the rate of that class predicted)."""
    class_labels(_split([0, 1, 2, 1, 0, 2], names), _split([0, 0, 0], names), "label", ("train.jsonl", "dev.jsonl"))
    said = capsys.readouterr().out
    shown = "'neg'" if names else "0"
    assert f"dev.jsonl: every label in column 'label' is {shown}: its figures score that one class of the 3 trained" \
        in said
    assert "a file sorted by label shows few classes in its first rows" in said
    class_labels(_split([0, 1, 2, 1], names), _split([0, 1, 0], names), "label", ("train.jsonl", "dev.jsonl"))
    assert "figures score" not in capsys.readouterr().out  # two classes: nothing to say


def test_declared_classes_the_training_split_never_shows_are_said(capsys):
    names, _, _ = class_labels(_split([0, 1, 1, 0]), None, "label", ("train.jsonl", "dev.jsonl"))
    assert names == NAMES
    assert "never shows the class 'neutral' of the 3 its data declares: the model gets them all, 1 never trained" in \
        capsys.readouterr().out


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_boolean_labels_as_pandas_writes_them_are_the_classes_false_and_true(suffix, tmp_path):
    """A boolean column (`df["label"] = df.stars >= 4`: True / False in pandas' CSV, true / false in its JSON Lines, a
    parquet bool) trains two classes, False 0 and True 1 (before: refused, 'got bool'); integer ids beside booleans
    are refused as a mix of types, not read as the classes of False and True."""
    import pandas as pd

    from train.data.files import load_text_dataset
    write = {".csv": lambda df, path: df.to_csv(path, index=False),
             ".jsonl": lambda df, path: df.to_json(path, orient="records", lines=True),
             ".parquet": lambda df, path: df.to_parquet(path)}[suffix]
    paths = [tmp_path / f"train{suffix}", tmp_path / f"dev{suffix}"]
    for path, labels in zip(paths, ([True, False, False, True], [False, True])):
        write(pd.DataFrame({"text": [f"row {i}" for i in range(len(labels))], "label": labels}), path)
    train, dev = (load_text_dataset(str(path), columns=(("text", "text"), ("label", "label"))) for path in paths)
    names, train_ids, dev_ids = class_labels(train, dev, "label", (str(paths[0]), str(paths[1])))
    assert names == ["False", "True"] and train_ids["label"] == [1, 0, 0, 1] and dev_ids["label"] == [0, 1]
    with pytest.raises(LabelError, match=r"dev.jsonl: row 0, column 'label': label 0 is a int but earlier labels are "
                                         r"bools; use one type for every label"):
        class_labels(train, _split([0, 1], None), "label", (str(paths[0]), "dev.jsonl"))


@pytest.mark.parametrize("streamed", [False, True])
def test_validation_labels_named_as_the_training_data_declares_its_classes_are_those_classes(streamed, tmp_path):
    """Training data of declared classes (a saved or Hub dataset's ClassLabel ids) and a validation CSV of their names,
    as pandas writes it: the names become the declared ids (before: 'label 'pos' is a str but earlier labels are
    ints'); a name the training data does not declare is refused naming it and the declared ones."""
    import pandas as pd

    from train.data.files import load_text_dataset
    path = tmp_path / "dev.csv"
    pd.DataFrame({"text": ["a", "b", "c"], "label": ["pos", "neutral", "neg"]}).to_csv(path, index=False)
    dev = load_text_dataset(str(path), columns=(("text", "text"), ("label", "label")))
    train = _split([0, 1, 2, 1])
    labels = streamed_class_labels if streamed else class_labels
    names, _, validation = labels(train.to_iterable_dataset() if streamed else train, dev, "label",
                                  ("train.jsonl", str(path)))
    assert names == NAMES and validation["label"] == [1, 2, 0]
    pd.DataFrame({"text": ["a", "b"], "label": ["pos", "positive"]}).to_csv(path, index=False)
    dev = load_text_dataset(str(path), columns=(("text", "text"), ("label", "label")))
    with pytest.raises(LabelError, match=r"dev.csv: line 3 \(CSV, column 'label'\): label 'positive' is none of the "
                                         r"classes train.jsonl declares \(neg, pos, neutral\); the model would have "
                                         r"no class for it"):
        labels(train.to_iterable_dataset() if streamed else train, dev, "label", ("train.jsonl", str(path)))


@pytest.mark.parametrize("skip_unlabeled", [False, True])
def test_validation_ids_of_declared_classes_are_read_as_their_names_for_training_labels_that_are_names(
        skip_unlabeled, tmp_path, capsys):
    """Training labels written as names (pandas' CSV) and a validation split saved by datasets with a ClassLabel in
    another order, -1 unlabelled: each id is read as its name, then as the training data's id of that name (before:
    'label 1 is a int but earlier labels are strs'); its -1 row is an unlabelled row; a name the training data never
    shows is refused naming it; nothing is written beside the saved split."""
    import pandas as pd

    from train.data.files import load_text_dataset
    train_path, dev_path = tmp_path / "train.csv", tmp_path / "dev"
    pd.DataFrame({"text": list("abcd"), "label": ["neg", "pos", "neutral", "pos"]}).to_csv(train_path, index=False)
    declared = datasets.ClassLabel(names=["pos", "neg", "neutral", "mixed"])
    datasets.Dataset.from_dict({"text": list("xyzw"), "label": [1, 0, 2, -1]}, features=datasets.Features(
        {"text": datasets.Value("string"), "label": declared})).save_to_disk(str(dev_path))
    saved = sorted(p.name for p in dev_path.iterdir())
    columns = (("text", "text"), ("label", "label"))
    train, dev = (load_text_dataset(str(path), columns=columns) for path in (train_path, dev_path))
    sources = (str(train_path), str(dev_path))
    if not skip_unlabeled:
        with pytest.raises(LabelError, match=r"dev: row 3, column 'label': the row has no label"):
            class_labels(train, dev, "label", sources)
        return
    names, _, validation = class_labels(train, dev, "label", sources, skip_unlabeled=True)
    assert [names[i] for i in validation["label"]] == ["neg", "pos", "neutral"]
    assert "dev: column 'label' holds ids of the classes it declares (pos, neg, neutral, mixed)" in \
        capsys.readouterr().out
    assert sorted(p.name for p in dev_path.iterdir()) == saved
    mixed = datasets.Dataset.from_dict({"text": ["x"], "label": [3]}, features=dev.features)
    with pytest.raises(LabelError, match=r"dev: row 0, column 'label': label 'mixed' never occurs in the training"):
        class_labels(train, mixed, "label", sources, skip_unlabeled=True)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
@pytest.mark.parametrize("labels", [[0, 1, None, 1, 0], ["neg", "pos", None, "pos", "neg"]], ids=["ids", "names"])
def test_a_class_label_pandas_writes_as_missing_is_an_unlabelled_row(labels, suffix, tmp_path, capsys):
    """A missing label as pandas writes it (an empty CSV field, JSON null, a parquet null; ids widened to floats
    beside it) is an unlabelled row, as for scores: refused naming skip_unlabeled, or left out with it and counted
    (before: refused as a missing value, 'fill it in or remove the row', with skip_unlabeled too)."""
    import pandas as pd

    from train.data.files import load_text_dataset
    path = tmp_path / f"train{suffix}"
    frame = pd.DataFrame({"text": [f"row {i}" for i in range(len(labels))], "label": labels})
    {".csv": lambda: frame.to_csv(path, index=False), ".jsonl": lambda: frame.to_json(path, orient="records",
                                                                                     lines=True),
     ".parquet": lambda: frame.to_parquet(path)}[suffix]()
    rows = load_text_dataset(str(path), columns=(("text", "text"), ("label", "label")))
    where = {".csv": r"line 4 \(CSV, column 'label'\)", ".jsonl": r"line 3 \(JSON Lines, column 'label'\)",
             ".parquet": r"row 2, column 'label'"}[suffix]
    with pytest.raises(LabelError, match=rf"train{suffix}: {where}: the row has no label \(null, or an empty or blank "
                                         r"field\): a row without a label is unlabelled; set skip_unlabeled: true"):
        class_labels(rows, None, "label", (str(path), "dev.jsonl"))
    names, train, _ = class_labels(rows, None, "label", (str(path), "dev.jsonl"), skip_unlabeled=True)
    assert names == (["0", "1"] if labels[0] == 0 else ["neg", "pos"]) and train["label"] == [0, 1, 1, 0]
    assert f"train{suffix}: skipped 1 rows labelled -1 or without a label in column 'label'" in capsys.readouterr().out


@pytest.mark.parametrize("skip_unlabeled", [False, True])
def test_a_streamed_row_without_a_label_is_refused_or_left_out_as_it_is_read(skip_unlabeled):
    stream = _split([0, None, 2]).to_iterable_dataset()
    if not skip_unlabeled:
        _, train, _ = streamed_class_labels(stream, None, "label", ("train.jsonl", "dev.jsonl"))
        with pytest.raises(LabelError, match=r"train.jsonl: row 1, column 'label': the row has no label"):
            list(train)
        return
    _, train, _ = streamed_class_labels(stream, None, "label", ("train.jsonl", "dev.jsonl"), skip_unlabeled=True)
    assert [row["label"] for row in train] == [0, 2]
