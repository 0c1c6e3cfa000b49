"""`modeling.arguments`: the cache under the installed transformers' name, the old one honoured, unknown keywords
refused. The families' forwards are walked by tests/modeling/test_contract.py; here the decorator itself, under both
names a transformers release may use."""

import inspect
import warnings

import pytest

from modeling import arguments
from modeling.arguments import OLD_CACHE_NAME, TRANSFORMERS_KEYWORDS, forward_arguments


class Head:
    accepts_loss_kwargs = True

    def forward(self, input_ids=None, cache=None, use_cache=None, **kwargs):
        return {"input_ids": input_ids, "cache": cache, **kwargs}


class PerExampleHead(Head):
    accepts_loss_kwargs = False


@pytest.mark.parametrize("installed", ["cache", OLD_CACHE_NAME])
def test_the_signature_names_the_cache_as_the_installed_release_does(monkeypatch, installed):
    monkeypatch.setattr(arguments, "CACHE_NAME", installed)
    forward = forward_arguments(Head.forward)
    parameters = list(inspect.signature(forward).parameters)
    assert parameters[:4] == ["self", "input_ids", installed, "use_cache"]
    assert set(parameters[4:]) == TRANSFORMERS_KEYWORDS and "kwargs" not in parameters
    for name in ("cache", OLD_CACHE_NAME):  # either name reaches the forward's `cache`
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert forward(Head(), 1, **{name: "kv"})["cache"] == "kv"
        old_and_renamed = name == OLD_CACHE_NAME and installed == "cache"  # deprecated, as transformers 5.24 says
        assert [str(w.message) for w in caught] == (
            ["`past_key_values` is deprecated and will be removed in version 5.40.0 for `Head.forward`. Use `cache` "
             "instead."] if old_and_renamed else [])


def test_both_names_at_once_and_unknown_keywords_are_refused_by_name():
    forward = forward_arguments(Head.forward)
    with pytest.raises(TypeError, match="Head.forward\\(\\) got the cache twice, as `cache` and `past_key_values`"):
        forward(Head(), cache=1, past_key_values=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'cache_params'; it takes .*input_ids"):
        forward(Head(), cache_params=1)
    assert forward(Head(), output_attentions=True, num_items_in_batch=3)["num_items_in_batch"] == 3
    with pytest.raises(TypeError, match="PerExampleHead.forward\\(\\) got an unexpected keyword argument "
                                        "'num_items_in_batch'"):
        forward(PerExampleHead(), num_items_in_batch=3)


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
def test_a_layer_passes_the_kernel_keywords_through():
    forward = forward_arguments(Head.forward, strict=False)
    assert forward(Head(), past_key_values=1, relative_position_index=2) == {
        "input_ids": None, "cache": 1, "relative_position_index": 2}
    assert "kwargs" in inspect.signature(forward).parameters
