"""Properties over random tiny configurations of every family (hypothesis): padding never changes the outputs at
real positions; no output of a causal model or decoder depends on a later token; cached incremental decoding equals
a full pass; save -> load round-trips exactly.

Each property draws a configuration (width, heads, layers, feed-forward size, vocabulary, norm position,
activation, attention kernel; for the RNN the cell, attention, input feeding, bridge, directions, source
reversal) and inputs from a seed. Example counts are bounded and the examples derandomized, so the default run is
fast and the same every time; `HYPOTHESIS_EXAMPLES=200 pytest tests/modeling/test_properties.py` explores further.
"""

import os
import tempfile

import pytest
import torch
import transformers
from conftest import preset
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

from modeling.modeling_lineage_rnn import LineageRnnCache

EXAMPLES = settings(max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", 10)), deadline=None, database=None,
                    derandomize="HYPOTHESIS_EXAMPLES" not in os.environ)
TOLERANCE = {"atol": 1e-5, "rtol": 1e-5}
FIRST_ORDINARY_ID = 5  # ids below are special tokens in every preset


@st.composite
def attention_configs(draw, family: str) -> transformers.PreTrainedConfig:
    heads = draw(st.sampled_from([1, 2, 4]))
    fields = {"hidden_size": heads * draw(st.sampled_from([4, 8])), "num_attention_heads": heads,
              "num_hidden_layers": draw(st.integers(1, 2)), "intermediate_size": draw(st.integers(8, 40)),
              "vocab_size": draw(st.integers(20, 60)), "norm_position": draw(st.sampled_from(["post", "pre"])),
              "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    if family != "transformer":
        fields["hidden_act"] = draw(st.sampled_from(["relu", "gelu", "gelu_new", "silu"]))
    config = preset(f"{family}-tiny", **fields)
    config._attn_implementation = draw(st.sampled_from(["eager", "sdpa"]))
    return config


@st.composite
def rnn_configs(draw) -> transformers.PreTrainedConfig:
    attention = draw(st.sampled_from(["none", "bahdanau", "luong-dot", "luong-general", "luong-concat"]))
    layers = draw(st.integers(1, 2))
    return preset("rnn-tiny", vocab_size=draw(st.integers(20, 60)), cell=draw(st.sampled_from(["gru", "lstm"])),
                  embedding_size=draw(st.sampled_from([8, 16])), hidden_size=draw(st.sampled_from([8, 16, 32])),
                  num_encoder_layers=layers, num_decoder_layers=layers, attention=attention,
                  input_feeding=attention.startswith("luong") and draw(st.booleans()),
                  bridge=draw(st.sampled_from(["last", "linear"] + ([] if attention == "none" else ["none"]))),
                  bidirectional_encoder=draw(st.booleans()), reverse_source=draw(st.booleans()),
                  hidden_dropout_prob=0.0)


CONFIGS = {"bert": attention_configs("bert"), "gpt": attention_configs("gpt"),
           "transformer": attention_configs("transformer"), "rnn": rnn_configs()}
SEQ2SEQ = ("transformer", "rnn")
SEEDS = st.integers(0, 2**31 - 1)


def tokens(generator: torch.Generator, config, *shape: int) -> torch.Tensor:
    return torch.randint(FIRST_ORDINARY_ID, config.vocab_size, shape, generator=generator)


def build(auto_class, config) -> torch.nn.Module:
    return auto_class.from_config(config).eval()


def outputs(model, family: str, ids: torch.Tensor, mask: torch.Tensor | None = None,
            target: torch.Tensor | None = None) -> torch.Tensor:
    """What the model hands on: logits of a seq2seq model, the last hidden state of an encoder or decoder-only one."""
    if family in SEQ2SEQ:
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=target, use_cache=False).logits
    return model(input_ids=ids, attention_mask=mask).last_hidden_state


@pytest.mark.parametrize("family", CONFIGS)
@EXAMPLES
@given(data=st.data(), seed=SEEDS, length=st.integers(1, 8), pad=st.integers(1, 5))
def test_padding_never_changes_the_outputs_at_real_positions(family, data, seed, length, pad):
    config = data.draw(CONFIGS[family])
    model, generator = build(AutoModelForSeq2SeqLM if family in SEQ2SEQ else AutoModel, config), \
        torch.Generator().manual_seed(seed)
    ids, junk = tokens(generator, config, 1, length), tokens(generator, config, 1, pad)  # junk: any id under the mask
    target = tokens(generator, config, 1, 4) if family in SEQ2SEQ else None
    alone = outputs(model, family, ids, target=target)
    mask = torch.tensor([[1] * length + [0] * pad])
    padded = outputs(model, family, torch.cat([ids, junk], dim=1), mask, target)
    kept = padded if family in SEQ2SEQ else padded[:, :length]  # source padding: every target position is real
    torch.testing.assert_close(kept, alone, **TOLERANCE)


@pytest.mark.parametrize("family", ["gpt", *SEQ2SEQ])
@EXAMPLES
@given(data=st.data(), seed=SEEDS, length=st.integers(2, 9))
def test_no_output_depends_on_a_later_token(family, data, seed, length):
    config = data.draw(CONFIGS[family])
    model, generator = build(AutoModelForSeq2SeqLM if family in SEQ2SEQ else AutoModelForCausalLM, config), \
        torch.Generator().manual_seed(seed)
    t = data.draw(st.integers(0, length - 2))
    sequence = tokens(generator, config, 2, length)
    changed = sequence.clone()
    changed[:, t + 1:] = tokens(generator, config, 2, length - t - 1)
    if family in SEQ2SEQ:  # the decoder: targets change after t, the source stays
        source = tokens(generator, config, 2, 5)
        before, after = (model(input_ids=source, decoder_input_ids=s, use_cache=False).logits for s in (sequence, changed))
    else:
        before, after = (model(s, use_cache=False).logits for s in (sequence, changed))
    torch.testing.assert_close(after[:, :t + 1], before[:, :t + 1], **TOLERANCE)
    assert not torch.allclose(after[:, t + 1:], before[:, t + 1:], **TOLERANCE)  # the later tokens do count


@pytest.mark.parametrize("family", ["gpt", *SEQ2SEQ])
@EXAMPLES
@given(data=st.data(), seed=SEEDS, prefix=st.integers(1, 4), steps=st.integers(1, 5))
def test_cached_decoding_equals_a_full_pass(family, data, seed, prefix, steps):
    config = data.draw(CONFIGS[family])
    model, generator = build(AutoModelForSeq2SeqLM if family in SEQ2SEQ else AutoModelForCausalLM, config), \
        torch.Generator().manual_seed(seed)
    sequence = tokens(generator, config, 2, prefix + steps)
    extra = {}
    if family in SEQ2SEQ:
        source = tokens(generator, config, 2, 6)
        extra = {"input_ids": source, "encoder_outputs": model.get_encoder()(source)}
        full = model(input_ids=source, decoder_input_ids=sequence, use_cache=False).logits
    else:
        full = model(sequence, use_cache=False).logits
    key = "decoder_input_ids" if family in SEQ2SEQ else "input_ids"
    out = model(**{**extra, key: sequence[:, :prefix]}, past_key_values=new_cache(family), use_cache=True)
    pieces = [out.logits]
    for t in range(prefix, prefix + steps):  # one token at a time, from the cache
        out = model(**{**extra, key: sequence[:, t:t + 1]}, past_key_values=out.past_key_values, use_cache=True)
        pieces.append(out.logits)
    assert out.past_key_values.get_seq_length() == prefix + steps
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, **TOLERANCE)


def new_cache(family: str):
    if family == "rnn":
        return LineageRnnCache()
    if family == "transformer":
        return transformers.EncoderDecoderCache(transformers.DynamicCache(), transformers.DynamicCache())
    return transformers.DynamicCache()


@pytest.mark.parametrize("family", CONFIGS)
@EXAMPLES
@given(data=st.data(), seed=SEEDS)
def test_save_and_load_round_trip_exactly(family, data, seed):
    config = data.draw(CONFIGS[family])
    auto_class = AutoModelForSeq2SeqLM if family in SEQ2SEQ else AutoModelForCausalLM if family == "gpt" else AutoModel
    model, generator = build(auto_class, config), torch.Generator().manual_seed(seed)
    ids = tokens(generator, config, 2, 6)
    target = tokens(generator, config, 2, 3) if family in SEQ2SEQ else None
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        kernel = getattr(config, "_attn_implementation", None)  # a run-time choice, not saved with the config
        loaded = auto_class.from_pretrained(folder, **({"attn_implementation": kernel} if kernel else {})).eval()
    fields, loaded_fields = model.config.to_dict(), loaded.config.to_dict()
    assert type(loaded) is type(model) and loaded_fields.pop("_name_or_path") == folder
    assert loaded_fields == {k: v for k, v in fields.items() if k != "_name_or_path"}
    state, loaded_state = model.state_dict(), loaded.state_dict()
    assert state.keys() == loaded_state.keys() and all(torch.equal(state[k], loaded_state[k]) for k in state)
    with torch.no_grad():
        before = model(input_ids=ids, decoder_input_ids=target) if family in SEQ2SEQ else model(ids)
        after = loaded(input_ids=ids, decoder_input_ids=target) if family in SEQ2SEQ else loaded(ids)
    key = "logits" if "logits" in before else "last_hidden_state"
    assert torch.equal(before[key], after[key])
