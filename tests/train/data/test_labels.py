"""Class labels of a streamed training split (`streamed_class_labels`): the classes its features declare, the same
ones required of the validation split, rows labelled -1 left out of both with `skip_unlabeled`, and a stream that
declares no classes refused naming the file and the column. Labels read whole: tests/train/data/test_bad_data.py."""

import datasets
import pytest

from train.data.labels import LabelError, streamed_class_labels

NAMES = ["neg", "pos", "neutral"]


def _split(labels: list[int], names: list[str] | None = NAMES) -> datasets.Dataset:
    label = datasets.ClassLabel(names=names) if names else datasets.Value("int64")
    features = datasets.Features({"text": datasets.Value("string"), "label": label})
    return datasets.Dataset.from_dict({"text": [f"row {i}" for i in range(len(labels))], "label": labels}, features)


@pytest.mark.parametrize("skip_unlabeled", [False, True])
def test_the_declared_classes_and_every_row_or_the_labelled_ones(skip_unlabeled):
    labels = [0, -1, 2, 1, -1, 0]
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
