"""Model presets: every shipped preset resolves to a Lineage config, overrides reach it, a missing one is named
with the presets there are, and a `model_overrides` key that is no config field is refused."""

import pytest

from train.run.recipes import RecipeError
from train.setup.presets import available_presets, check_model_overrides, load_model_config


@pytest.mark.parametrize("name", available_presets())
def test_every_preset_resolves_by_name_and_takes_its_own_fields_as_overrides(name):
    config = load_model_config(name)
    assert config.model_type.startswith("lineage-")
    check_model_overrides(dict.fromkeys(config.to_dict()), config)


def test_overrides_reach_the_config():
    assert load_model_config("bert-tiny", vocab_size=50).vocab_size == 50


def test_missing_preset_names_the_presets():
    with pytest.raises(FileNotFoundError, match="bert-huge.*bert-tiny"):
        load_model_config("bert-huge")


def test_unknown_override_is_refused_by_name():
    config = load_model_config("bert-tiny")
    with pytest.raises(RecipeError, match="'model_overrides': 'hiden_size' is no field of lineage-bert configs"):
        check_model_overrides({"hiden_size": 8}, config)
