"""The configs take the papers' names and transformers' other names of their fields (`attribute_map`, as T5 and
Marian do) and refuse a keyword that reads like a size but no field takes, so a config never silently builds the
default model: `AutoConfig.for_model("lineage-transformer", d_model=64)` is 64 wide. Configs saved by earlier releases,
which kept such keywords as unused attributes, still load, with a warning."""

import json
import warnings

import pytest
import torch
from conftest import preset
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoConfig, AutoModel

EXAMPLES = settings(max_examples=15, deadline=None, database=None, derandomize=True)
ATTENTION_FAMILIES = ("lineage-bert", "lineage-gpt", "lineage-transformer")
SIZE_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
               "max_position_embeddings")


@st.composite
def sizes(draw) -> dict[str, int]:
    heads = draw(st.sampled_from([1, 2, 4]))
    return {"hidden_size": heads * draw(st.sampled_from([4, 8, 16])), "num_attention_heads": heads,
            "intermediate_size": draw(st.integers(8, 64)), "num_hidden_layers": draw(st.integers(1, 3)),
            "max_position_embeddings": draw(st.integers(16, 64))}


def renamed(model_type: str, fields: dict[str, int], data: st.DataObject) -> dict[str, int]:
    """`fields` with each one under a name drawn among its own and its other names."""
    attribute_map = type(AutoConfig.for_model(model_type)).attribute_map
    names = {field: [field, *(alias for alias, target in attribute_map.items() if target == field)]
             for field in fields}
    return {data.draw(st.sampled_from(names[field])): value for field, value in fields.items()}


@pytest.mark.parametrize("model_type", ATTENTION_FAMILIES)
@EXAMPLES
@given(data=st.data(), fields=sizes())
def test_any_name_of_a_field_builds_the_model_that_field_builds(model_type, data, fields):
    given_names = renamed(model_type, fields, data)
    config = AutoConfig.for_model(model_type, vocab_size=50, **given_names)
    assert config.to_dict() == AutoConfig.for_model(model_type, vocab_size=50, **fields).to_dict()
    for name, value in given_names.items():
        assert getattr(config, name) == value
    model = AutoModel.from_config(config)
    assert model.get_input_embeddings().weight.shape == (50, fields["hidden_size"])


def test_the_transformer_of_the_paper_table_is_built_by_its_names():
    config = AutoConfig.for_model("lineage-transformer", N=2, d_model=64, d_ff=96, h=4, d_k=16, d_v=16)
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size, config.num_attention_heads) == (
        2, 64, 96, 4)
    model = AutoModel.from_config(config)
    assert model.get_input_embeddings().weight.shape[1] == 64
    config.d_model = 32  # written through, as read
    assert config.hidden_size == 32


@pytest.mark.parametrize("model_type", ATTENTION_FAMILIES)
def test_a_config_built_by_other_names_saves_the_fields_and_loads_back(model_type, tmp_path):
    config = AutoConfig.for_model(model_type, d_model=48, num_heads=4, num_layers=2, d_ff=40)
    config.save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())
    assert not {"d_model", "num_heads", "num_layers", "d_ff"} & set(stored)
    assert (stored["hidden_size"], stored["num_attention_heads"], stored["num_hidden_layers"],
            stored["intermediate_size"]) == (48, 4, 2, 40)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert {k: v for k, v in loaded.to_dict().items() if k != "_name_or_path"} == {
        k: v for k, v in config.to_dict().items() if k != "_name_or_path"}


@pytest.mark.parametrize("model_type, keywords, message", [
    ("lineage-transformer", {"d_model": 64, "hidden_size": 32},
     "`hidden_size` given twice .* hidden_size=32, d_model=64"),
    ("lineage-transformer", {"h": 4, "num_heads": 2}, "`num_attention_heads` given twice"),
    ("lineage-gpt", {"n_embd": 64, "d_model": 32}, "`hidden_size` given twice"),
])
def test_a_field_given_twice_with_different_values_is_refused(model_type, keywords, message):
    with pytest.raises(ValueError, match=message):
        AutoConfig.for_model(model_type, **keywords)


@pytest.mark.parametrize("model_type, keyword", [
    ("lineage-transformer", "embedding_size"), ("lineage-transformer", "num_decoder_layers"),
    ("lineage-bert", "num_key_value_heads"), ("lineage-bert", "n_ctx"), ("lineage-gpt", "rotary_dim"),
    ("lineage-gpt", "d_kv"), ("lineage-rnn", "num_layers"), ("lineage-rnn", "d_model"),
])
def test_a_keyword_that_reads_like_a_size_but_no_field_takes_is_refused(model_type, keyword):
    config_class = type(AutoConfig.for_model(model_type))
    with pytest.raises(ValueError, match=rf"{config_class.__name__} has no field `{keyword}`: the model would be "
                                         r"built without it. Its sizes are vocab_size, "):
        AutoConfig.for_model(model_type, **{keyword: 8})


@pytest.mark.parametrize("model_type", [*ATTENTION_FAMILIES, "lineage-rnn"])
def test_keywords_that_read_like_sizes_but_are_none_still_pass(model_type):
    config = AutoConfig.for_model(model_type, num_labels=3, num_beams=4, no_repeat_ngram_size=2)
    assert config.num_labels == 3


def test_the_head_size_of_the_paper_is_taken_when_it_agrees_and_refused_otherwise():
    assert AutoConfig.for_model("lineage-bert", hidden_size=64, num_attention_heads=4, head_dim=16).hidden_size == 64
    with pytest.raises(ValueError, match=r"`d_k`=32: the head size is hidden_size / num_attention_heads = 64 / 4 = 16"):
        AutoConfig.for_model("lineage-transformer", d_model=64, h=4, d_k=32)


def test_a_config_an_earlier_release_saved_with_ignored_keywords_loads_as_its_weights_were_built(tmp_path):
    """Earlier releases kept `d_model`, `d_k` or `embedding_size` beside the fields without reading them: the model
    was built from the fields, so those stay, and each ignored keyword is named in a warning."""
    model = AutoModel.from_config(preset("transformer-tiny"))
    model.save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**stored, "d_model": 64, "h": 2, "d_k": 3,
                                                      "embedding_size": 7}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = AutoModel.from_pretrained(tmp_path)
    said = " ".join(str(w.message) for w in caught)
    assert "`d_model`=64, another name for it that earlier releases ignored" in said and "`h`=2" in said
    assert "`d_k`=3" in said and "no field `embedding_size`" in said
    assert (loaded.config.hidden_size, loaded.config.num_attention_heads) == (32, 4)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
