"""A pretraining run's data: every pretrained family has its command, and a family without pretraining data is
refused by name before anything is prepared."""

import pytest

from train import cli
from train.run.recipes import recipe_from_dict
from train.setup.pretraining import COMMANDS, pretraining_data


def test_every_pretrained_family_names_a_command_of_the_cli():
    assert set(COMMANDS.values()) <= {command.module for command in cli.COMMANDS.values()}


def test_a_family_without_pretraining_data_is_refused_by_name():
    with pytest.raises(ValueError, match="family 'seq2seq' has no pretraining data; families: gpt, bert"):
        pretraining_data(recipe_from_dict({}), "seq2seq", None, [], [])
