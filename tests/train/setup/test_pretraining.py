"""A pretraining run's data: every pretrained family has its command, a family without pretraining data is refused
by name before anything is prepared, and the documents come from the column the recipe's `text_column` names."""

import json

import pytest

from train import cli
from train.data.errors import UnknownColumnError
from train.run.recipes import check_command_keys, recipe_from_dict
from train.setup.pretraining import COMMANDS, pretraining_data, pretraining_documents


def jsonl(path, rows: list[dict]):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_every_pretrained_family_names_a_command_of_the_cli():
    assert set(COMMANDS.values()) <= {command.module for command in cli.COMMANDS.values()}


def test_a_family_without_pretraining_data_is_refused_by_name():
    with pytest.raises(ValueError, match="family 'seq2seq' has no pretraining data; families: gpt, bert"):
        pretraining_data(recipe_from_dict({}), "seq2seq", None, [], [])


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("family", ["gpt", "bert"])
def test_the_documents_come_from_the_column_text_column_names(tmp_path, family, streaming):
    """A file whose documents sit in `body`, beside a `text` column of something else: both splits read `body`."""
    bodies = [f"Document {i} has a first sentence. And a second one." for i in range(6)]
    rows = [{"text": "not this", "body": body} for body in bodies]
    recipe = recipe_from_dict({"train_file": jsonl(tmp_path / "train.jsonl", rows), "text_column": "body",
                               "validation_file": jsonl(tmp_path / "dev.jsonl", rows[:2]), "streaming": streaming,
                               "max_steps": 1})
    check_command_keys(recipe, COMMANDS[family], "")
    train, validation = pretraining_documents(recipe, family)
    assert [row["text"] for row in train] == bodies and [row["text"] for row in validation] == bodies[:2]


def test_documents_in_a_column_of_another_name_are_refused_naming_text_column(tmp_path):
    recipe = recipe_from_dict({"train_file": jsonl(tmp_path / "train.jsonl", [{"body": "A document."}] * 3)})
    with pytest.raises(UnknownColumnError, match=r"no column 'text' .*\['body'\]: name the column of the documents "
                                                 r"with the recipe key text_column, or rename it"):
        pretraining_documents(recipe, "gpt")
