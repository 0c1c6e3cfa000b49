"""The properties every family and every head keep, written once: padding never changes the outputs at real
positions; no output of a causal model or decoder depends on a later token; cached incremental decoding equals a full
pass; save -> load round-trips exactly; parity with the transformers reference under copied weights.

First over random tiny configurations of each family's base or LM model (hypothesis): each property draws a
configuration (width, heads, layers, feed-forward size, vocabulary, norm position, activation, attention kernel; for
the RNN the cell, attention, input feeding, bridge, directions, source reversal) and inputs from a seed. Example
counts are bounded and the examples derandomized, so the default run is fast and the same every time;
`HYPOTHESIS_EXAMPLES=200 pytest tests/modeling/test_properties.py` explores further.

Then over every head test_contract.py walks, on the tiny presets under each family's variants and both kernels: the
same properties per head (with eager == sdpa, generate() with and without its cache, on a padded batch of prompts and
as the argmax of full passes, sparse prediction, loading in a process without this project, gradient checkpointing,
a static cache == the dynamic one, fullgraph compilation, seeded sampling, what the output flags return, resizing the
vocabulary), and parity
for every pair `modeling.conversion` supports.
"""

import copy
import inspect
import os
import string
import tempfile

import pytest
import test_contract as contract
import test_conversion as bert_conversion
import test_conversion_gpt as gpt_conversion
import test_conversion_marian as marian_conversion
import torch
import transformers
from conftest import preset, run_clean_process
from host_reads import HostReads
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM
from transformers.modeling_layers import GradientCheckpointingLayer

from modeling import (
    LineageBertForMaskedLM,
    LineageBertForMultipleChoice,
    LineageBertForPreTraining,
    LineageBertForQuestionAnswering,
    LineageBertForTokenClassification,
    LineageBertLMHeadModel,
    LineageBertModel,
    LineageGptForCausalLM,
    LineageGptForMultipleChoice,
    LineageGptModel,
    LineageRnnForConditionalGeneration,
    LineageRnnModel,
    LineageTransformerForConditionalGeneration,
    LineageTransformerModel,
)
from modeling.arguments import cache_keyword, output_cache
from modeling.conversion import CONVERSIONS, from_transformers, to_transformers
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
                  maxout_size=draw(st.sampled_from([None, 3])) if attention == "bahdanau" else None,
                  bridge=draw(st.sampled_from(["last", "linear"] + ([] if attention == "none" else ["none"]))),
                  bidirectional_encoder=draw(st.booleans()), reverse_source=draw(st.booleans()),
                  hidden_dropout_prob=0.0)


CONFIGS = {"bert": attention_configs("bert"), "gpt": attention_configs("gpt"),
           "transformer": attention_configs("transformer"), "rnn": rnn_configs()}
SEQ2SEQ = ("transformer", "rnn")
SEEDS = st.integers(0, 2**31 - 1)


def tokens(generator: torch.Generator, config, *shape: int) -> torch.Tensor:
    return torch.randint(FIRST_ORDINARY_ID, config.vocab_size, shape, generator=generator)


def build(auto_class, config, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)  # the weights too are the example's: a failure replays
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
    model, generator = build(AutoModelForSeq2SeqLM if family in SEQ2SEQ else AutoModel, config, seed), \
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
    model, generator = build(AutoModelForSeq2SeqLM if family in SEQ2SEQ else AutoModelForCausalLM, config, seed), \
        torch.Generator().manual_seed(seed)
    t = data.draw(st.integers(0, length - 2))
    sequence = tokens(generator, config, 2, length)
    changed = sequence.clone()
    changed[:, t + 1:] = tokens(generator, config, 2, length - t - 1)
    if family in SEQ2SEQ:  # the decoder: targets change after t, the source stays
        source = tokens(generator, config, 2, 5)
        before, after = (model(input_ids=source, decoder_input_ids=s, use_cache=False).logits
                         for s in (sequence, changed))
    else:
        before, after = (model(s, use_cache=False).logits for s in (sequence, changed))
    torch.testing.assert_close(after[:, :t + 1], before[:, :t + 1], **TOLERANCE)
    assert not torch.allclose(after[:, t + 1:], before[:, t + 1:], **TOLERANCE)  # the later tokens do count


@pytest.mark.parametrize("family", ["gpt", *SEQ2SEQ])
@EXAMPLES
@given(data=st.data(), seed=SEEDS, prefix=st.integers(1, 4), steps=st.integers(1, 5))
def test_cached_decoding_equals_a_full_pass(family, data, seed, prefix, steps):
    config = data.draw(CONFIGS[family])
    model, generator = build(AutoModelForSeq2SeqLM if family in SEQ2SEQ else AutoModelForCausalLM, config, seed), \
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
    out = model(**{**extra, key: sequence[:, :prefix]}, cache=new_cache(family), use_cache=True)
    pieces = [out.logits]
    for t in range(prefix, prefix + steps):  # one token at a time, from the cache
        out = model(**{**extra, key: sequence[:, t:t + 1]}, cache=out.past_key_values, use_cache=True)
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
    model, generator = build(auto_class, config, seed), torch.Generator().manual_seed(seed)
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


# ----------------------------------------------------------------------------------------------------------
# The same properties over every head of every family
# ----------------------------------------------------------------------------------------------------------
# Every head test_contract.py walks (every class a family registers with the Auto classes), on its family's tiny
# preset, under each configuration its forward branches on (VARIANTS) and each attention kernel. Lengths differ from
# every other dimension of the tiny presets (hidden 32, vocabulary 99, 2 labels, 3 choices, 4 heads), so an output
# along the input is found by its length.

LENGTH, TARGET, MEMORY = 7, 5, 6  # input (source) length, decoder target length, BERT decoder's encoder memory
EXACT = {"rtol": 0, "atol": 0}
CLOSE = {"rtol": 0, "atol": 1e-5}
KERNELS = ("eager", "sdpa")
DECODERS = [("none", False), ("bahdanau", False), ("luong-dot", False), ("luong-dot", True), ("luong-general", False),
            ("luong-general", True), ("luong-concat", False), ("luong-concat", True)]
VARIANTS = {  # the first of each family is its preset
    "Bert": ({}, {"norm_position": "pre"}),
    "Gpt": ({}, {"norm_position": "pre"}),
    "Transformer": ({}, {"norm_position": "pre", "position_embedding_type": "learned"},
                    {"sinusoidal_layout": "split"}),
    "Rnn": tuple({"attention": attention, "input_feeding": feeding, "cell": cell, "reverse_source": cell == "lstm"}
                 for attention, feeding in DECODERS for cell in ("gru", "lstm")),
}
HEAD_VARIANTS = {LineageBertLMHeadModel: ({"add_cross_attention": True},),  # BERT as a decoder over encoder memory
                 LineageTransformerForConditionalGeneration: ({"final_logits_bias": True},),
                 LineageRnnForConditionalGeneration: ({"tie_word_embeddings": True, "embedding_size": 32},)}
PADDING_SIDES = {"Gpt": ("left", "right")}  # the others number positions from the first token: right padding only
MULTIPLE_CHOICE = (LineageBertForMultipleChoice, LineageGptForMultipleChoice)
CAUSAL = [LineageBertLMHeadModel, LineageGptModel, LineageGptForCausalLM, LineageTransformerModel,
          LineageTransformerForConditionalGeneration, LineageRnnModel, LineageRnnForConditionalGeneration]
BIDIRECTIONAL = [LineageBertModel, LineageBertForPreTraining, LineageBertForMaskedLM, LineageBertForTokenClassification,
                 LineageBertForQuestionAnswering]
ATTENTION_HEADS = [c for c in contract.HEADS if contract.family(c) != "Rnn"]


def cases(heads, kernels: bool = True, sides: bool = False):
    """pytest parameters (model_class, variant, kernel[, side]) for `heads` under their families' variants, with each
    attention kernel (`kernels`) and each padding side its family takes (`sides`)."""
    params = []
    for model_class in heads:
        name = contract.family(model_class)
        for variant in VARIANTS[name] + HEAD_VARIANTS.get(model_class, ()):
            for kernel in KERNELS if kernels and name != "Rnn" else (None,):
                for side in PADDING_SIDES.get(name, ("right",)) if sides else (None,):
                    label = "-".join(str(v) for v in variant.values()) or "preset"
                    values = (model_class, variant, kernel, side) if sides else (model_class, variant, kernel)
                    params.append(pytest.param(*values, id="-".join(
                        str(p) for p in (model_class.__name__, label, kernel, side) if p is not None)))
    names = "model_class, variant, kernel, side" if sides else "model_class, variant, kernel"
    return pytest.mark.parametrize(names, params)


def head(model_class, variant: dict, kernel: str | None = None, **overrides) -> torch.nn.Module:
    """The head on its family's tiny preset (no dropout) in eval mode; a logits bias, zero at init, made random."""
    kernel = {"attn_implementation": kernel} if kernel else {}
    model = contract.build(model_class, **variant, **kernel, **overrides).eval()
    if getattr(model, "final_logits_bias", None) is not None:
        model.final_logits_bias.normal_()
    return model


def ordinary(*shape: int) -> torch.Tensor:
    return torch.randint(FIRST_ORDINARY_ID, contract.V, shape)


def padded_batch(model, side: str = "right", lengths=(LENGTH, 4, 2, 6)) -> tuple[dict, torch.Tensor]:
    """Inputs of one sequence per length (multiple choice: 2 examples of 2 choices), padded on `side` with ordinary
    ids under the mask (whatever sits there must not count); returns (inputs, (rows, T) mask of the real positions)."""
    rows, width = len(lengths), max(lengths)
    mask = torch.zeros(rows, width, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, slice(width - n, width) if side == "left" else slice(0, n)] = 1
    shape = (rows // 2, 2, width) if isinstance(model, MULTIPLE_CHOICE) else (rows, width)
    inputs = {"input_ids": ordinary(rows, width).view(shape), "attention_mask": mask.view(shape)}
    name = contract.family(type(model))
    if name == "Bert":  # two segments
        inputs["token_type_ids"] = (torch.arange(width) >= 3).long().expand(shape).contiguous()
    if name in ("Transformer", "Rnn"):
        inputs["decoder_input_ids"] = ordinary(rows, TARGET)
    if getattr(model.config, "add_cross_attention", False):
        inputs["encoder_hidden_states"] = torch.randn(rows, MEMORY, model.config.hidden_size)
        inputs["encoder_attention_mask"] = torch.ones(rows, MEMORY, dtype=torch.long)
        inputs["encoder_attention_mask"][1, 4:] = 0
    return inputs, mask


def alone(inputs: dict, mask: torch.Tensor, row: int, model) -> dict:
    """Sequence `row` of a padded batch by itself: its real tokens only."""
    real = mask[row].bool()
    chosen = {}
    for key, value in inputs.items():
        if key in ("input_ids", "attention_mask", "token_type_ids"):
            value = value.flatten(0, -2)[row, real][None]
            chosen[key] = value[None] if isinstance(model, MULTIPLE_CHOICE) else value
        else:
            chosen[key] = value[row:row + 1]
    return chosen


def named_outputs(output) -> dict[str, torch.Tensor]:
    """The tensors a forward returns (losses, caches and tuples of layers left out)."""
    return {k: v for k, v in output.items() if isinstance(v, torch.Tensor) and not k.endswith("loss")}


def row_of(output: dict, row: int, mask: torch.Tensor, model) -> dict[str, torch.Tensor]:
    """Sequence `row`'s outputs in a padded batch: along the input, the real positions only."""
    chosen = {}
    for key, value in output.items():
        value = value.flatten(0, 1)[row] if isinstance(model, MULTIPLE_CHOICE) else value[row]
        chosen[key] = value[mask[row].bool()] if value.dim() and value.shape[0] == mask.shape[1] else value
    return chosen


@cases(contract.HEADS, sides=True)
def test_padding_never_changes_the_outputs_at_real_positions_of_any_head(model_class, variant, kernel, side):
    """Each sequence alone, unpadded, gives every output of the head (at its real positions) that it gives inside a
    padded batch, whatever ids sit under the mask."""
    model = head(model_class, variant, kernel)
    inputs, mask = padded_batch(model, side)
    batched = named_outputs(model(**inputs))
    assert batched
    for row in range(mask.shape[0]):
        expected = row_of(batched, row, mask, model)
        by_itself = {k: v[0, 0] if isinstance(model, MULTIPLE_CHOICE) else v[0]
                     for k, v in named_outputs(model(**alone(inputs, mask, row, model))).items()}
        assert by_itself.keys() == expected.keys()
        for key, value in by_itself.items():
            torch.testing.assert_close(value, expected[key], **CLOSE, msg=f"{key}, sequence {row}")


@cases(ATTENTION_HEADS, kernels=False, sides=True)
def test_eager_and_sdpa_give_the_same_outputs(model_class, variant, kernel, side):
    """At every position of a right-padded batch, at the real ones of a left-padded one (where a padding query that
    sees no real key is each kernel's own)."""
    eager = head(model_class, variant, "eager")
    sdpa = head(model_class, variant, "sdpa")
    sdpa.load_state_dict(eager.state_dict())
    inputs, mask = padded_batch(eager, side)
    if side == "right":
        mask = torch.ones_like(mask)
    expected, actual = named_outputs(eager(**inputs)), named_outputs(sdpa(**inputs))
    assert expected.keys() == actual.keys() and expected
    for row in range(mask.shape[0]):
        for key, value in row_of(actual, row, mask, sdpa).items():
            torch.testing.assert_close(value, row_of(expected, row, mask, eager)[key], **CLOSE, msg=key)


def per_token(output, length: int) -> dict[str, torch.Tensor]:
    return {k: v for k, v in named_outputs(output).items() if v.dim() >= 2 and v.shape[1] == length}


@cases(CAUSAL + BIDIRECTIONAL)
def test_a_causal_head_never_looks_ahead_and_an_encoder_does(model_class, variant, kernel):
    """No output of a decoder at position t depends on a token after t (the later outputs do change); the same test
    tells a bidirectional encoder apart: its outputs at t do depend on later tokens."""
    model, length = head(model_class, variant, kernel), LENGTH + 1  # seq2seq: a source of LENGTH, a target of length
    seq2seq = model_class in contract.SEQ2SEQ
    inputs, _ = padded_batch(model, lengths=(LENGTH if seq2seq else length,) * 2)
    key = "decoder_input_ids" if seq2seq else "input_ids"
    inputs[key] = ordinary(2, length)
    before = per_token(model(**inputs), length)
    assert before
    for t in range(length - 1):
        changed = inputs[key].clone()
        changed[:, t + 1:] = ordinary(2, length - t - 1)
        after = per_token(model(**{**inputs, key: changed}), length)
        for name, value in after.items():
            if model_class in CAUSAL:
                torch.testing.assert_close(value[:, :t + 1], before[name][:, :t + 1], rtol=0, atol=1e-6, msg=name)
                assert not torch.allclose(value[:, t + 1:], before[name][:, t + 1:]), name  # the later tokens count
            else:
                assert not torch.allclose(value[:, :t + 1], before[name][:, :t + 1]), name


@cases(CAUSAL)
def test_cached_decoding_equals_a_full_pass_for_every_head_with_a_cache(model_class, variant, kernel):
    """A prefix, then one token at a time from the cache, gives the outputs of one pass over the whole sequence (at
    every real position: decoder-only rows are left-padded, seq2seq sources right-padded), the same alignments over
    the source, and a cache that holds every position (and the encoder's keys once)."""
    model, length, prefix = head(model_class, variant, kernel), LENGTH + 2, 3
    seq2seq = model_class in contract.SEQ2SEQ
    inputs, mask = padded_batch(model, *(("right", (LENGTH, 4)) if seq2seq else ("left", (length, 6))))
    inputs.pop("token_type_ids", None)
    key = "decoder_input_ids" if seq2seq else "input_ids"
    if seq2seq:
        inputs[key] = ordinary(2, length)
    sequence, context = inputs.pop(key), {k: v for k, v in inputs.items() if k != "attention_mask" or seq2seq}
    masked = {} if seq2seq else {"attention_mask": mask}
    full = model(**context, **masked, **{key: sequence}, use_cache=False, output_attentions=True)
    out = model(**context, **{k: v[:, :prefix] for k, v in masked.items()}, **{key: sequence[:, :prefix]},
                use_cache=True, output_attentions=True)
    steps = [out]
    for t in range(prefix, length):
        out = model(**context, **{k: v[:, :t + 1] for k, v in masked.items()}, **{key: sequence[:, t:t + 1]},
                    **cache_keyword(output_cache(out)), use_cache=True, output_attentions=True)
        steps.append(out)
    real = torch.ones(2, length, dtype=torch.bool) if seq2seq else mask.bool()
    expected = per_token(full, length)
    assert expected
    for name, value in expected.items():
        torch.testing.assert_close(torch.cat([named_outputs(s)[name] for s in steps], 1)[real], value[real], **CLOSE,
                                   msg=name)
    if full.get("cross_attentions") is not None:  # (B, H, T, S) per layer; (B, T, H, S) at real queries
        for layer, weights in enumerate(full.cross_attentions):
            stepped = torch.cat([s.cross_attentions[layer] for s in steps], dim=2)
            torch.testing.assert_close(stepped.transpose(1, 2)[real], weights.transpose(1, 2)[real], **CLOSE,
                                       msg=f"cross attention {layer}")
    cache = output_cache(out)
    assert cache.get_seq_length() == length
    if contract.family(model_class) == "Transformer" or getattr(model.config, "add_cross_attention", False):
        assert isinstance(cache, transformers.EncoderDecoderCache)
        memory = LENGTH if seq2seq else MEMORY
        assert cache.cross_attention_cache.get_seq_length() == memory  # the memory's keys, projected once


@cases([c for c in contract.HEADS if "sparse_prediction" in inspect.signature(c.forward).parameters], kernels=False)
def test_sparse_prediction_gives_the_dense_logits_loss_and_gradients_at_labelled_positions(model_class, variant,
                                                                                           kernel):
    """`sparse_prediction` (a training call option) predicts the labelled positions only: their logits, the loss and
    every gradient are the dense call's; without labels the logits keep their dense shape."""
    dense = head(model_class, variant).train()
    sparse = head(model_class, variant).train()
    sparse.load_state_dict(dense.state_dict())
    inputs, labels = contract.inputs_and_labels(model_class)
    dense_out = dense(**inputs, **labels, return_logits=True)
    sparse_out = sparse(**inputs, **labels, return_logits=True, sparse_prediction=True)
    key = "prediction_logits" if "prediction_logits" in dense_out else "logits"
    labelled = labels["labels"] != -100
    assert sparse_out[key].shape == (int(labelled.sum()), contract.V)
    torch.testing.assert_close(sparse_out[key], dense_out[key][labelled], rtol=0, atol=1e-5)
    torch.testing.assert_close(sparse_out.loss, dense_out.loss, rtol=0, atol=1e-6)
    dense_out.loss.backward()
    sparse_out.loss.backward()
    for (name, a), b in zip(dense.named_parameters(), sparse.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-7, msg=name)
    unlabelled = sparse(**contract.unlabelled_inputs(model_class), sparse_prediction=True)[key]
    assert unlabelled.shape == dense(**contract.unlabelled_inputs(model_class))[key].shape


CAUSAL_LMS = [LineageBertLMHeadModel, LineageGptForCausalLM]


@pytest.mark.parametrize("model_class", CAUSAL_LMS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("mode", ["train", "eval"])
@EXAMPLES
@given(seed=SEEDS, ignored=st.floats(0.0, 0.9))
def test_shift_labels_are_the_targets_as_given_and_labels_then_move_nothing(model_class, mode, seed, ignored):
    """transformers 5.24's causal LMs take `shift_labels` (`ForCausalLMLoss`): given with `labels`, position t's logits
    are scored against `shift_labels[t]` as given, so changing only `labels` moves nothing, and the labels shifted left
    give the loss of the labels alone; in training (the loss without the logits) and in evaluation alike."""
    model = head(model_class, {}).train(mode == "train")
    inputs, _ = contract.inputs_and_labels(model_class)
    generator = torch.Generator().manual_seed(seed)

    def targets() -> torch.Tensor:
        ids = torch.randint(0, contract.V, (contract.B, contract.T), generator=generator)
        return ids.masked_fill(torch.rand(ids.shape, generator=generator) < ignored, -100)

    labels, other, shift_labels = targets(), targets(), targets()
    shift_labels[0, 0] = labels[0, 1] = 7  # a token to score either way
    with torch.no_grad():
        logits = model(**inputs).logits
        given = model(**inputs, labels=labels, shift_labels=shift_labels).loss
        moved = model(**inputs, labels=other, shift_labels=shift_labels).loss
        shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]  # (B, T): the next token's label
        aligned = model(**inputs, labels=labels, shift_labels=shifted).loss
        plain = model(**inputs, labels=labels).loss
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, contract.V), shift_labels.reshape(-1))
    torch.testing.assert_close(given, expected, **TOLERANCE)
    assert torch.equal(given, moved)
    torch.testing.assert_close(aligned, plain, rtol=0, atol=0)


GENERATION_MODES = {"greedy": {}, "beam": {"num_beams": 3, "num_return_sequences": 2, "length_penalty": 0.6},
                    "sampling": {"do_sample": True, "top_k": 5}}


@cases(contract.GENERATIVE, kernels=False)
@pytest.mark.parametrize("mode", GENERATION_MODES)
def test_generate_uses_its_cache_and_gives_what_it_gives_without(model_class, variant, kernel, mode):
    """With the cache every step after the first feeds one new token (the cache reached the forward under the name
    generate() passed it), and the tokens, the logits and the scores of every step (beam search: of every returned
    sequence) equal those of generation without a cache, left padding included."""
    model = head(model_class, variant)
    model.generation_config.eos_token_id = None
    seq2seq = model_class in contract.SEQ2SEQ
    prompt, _ = padded_batch(model, side="right" if seq2seq else "left", lengths=(6, 4))
    prompt.pop("decoder_input_ids", None)
    prompt.pop("token_type_ids", None)
    fed = []
    key = "decoder_input_ids" if seq2seq else "input_ids"
    hook = model.register_forward_pre_hook(lambda _, args, kwargs: fed.append(kwargs[key].shape[1]), with_kwargs=True)
    outputs = {}
    for use_cache in (True, False):
        torch.manual_seed(1)
        fed.clear()
        outputs[use_cache] = model.generate(**prompt, max_new_tokens=6, use_cache=use_cache, pad_token_id=0,
                                            return_dict_in_generate=True, output_logits=True, output_scores=True,
                                            **GENERATION_MODES[mode])
        if use_cache:
            assert len(fed) == 6 and fed[1:] == [1] * 5, fed
    hook.remove()
    cached, uncached = outputs[True], outputs[False]
    assert output_cache(cached) is not None and output_cache(uncached) is None
    if contract.family(model_class) == "Rnn":  # the recurrent state, not keys and values
        assert isinstance(output_cache(cached), LineageRnnCache)
    torch.testing.assert_close(cached.sequences, uncached.sequences, **EXACT)
    for name in ("logits", "scores"):
        assert len(cached[name]) == len(uncached[name]) == 6
        for step, (a, b) in enumerate(zip(cached[name], uncached[name])):
            torch.testing.assert_close(a, b, **CLOSE, msg=f"{name} at step {step}")
    if mode == "beam":
        torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, **CLOSE)


@cases(contract.GENERATIVE, kernels=False)
@pytest.mark.parametrize("num_beams", [1, 3])
def test_a_padded_batch_generates_what_each_prompt_generates_alone(model_class, variant, kernel, num_beams):
    """Padding at generation: each row of a padded batch of prompts (left-padded decoder-only, right-padded sources)
    gets the tokens it gets alone, and under greedy search the logits of every step."""
    model = head(model_class, variant)
    model.generation_config.eos_token_id = None
    seq2seq = model_class in contract.SEQ2SEQ
    inputs, mask = padded_batch(model, side="right" if seq2seq else "left", lengths=(6, 3, 5))
    inputs = {k: v for k, v in inputs.items() if k not in ("decoder_input_ids", "token_type_ids")}
    kwargs = dict(max_new_tokens=6, num_beams=num_beams, pad_token_id=0, return_dict_in_generate=True,
                  output_logits=True)
    batched = model.generate(**inputs, **kwargs)
    for row in range(mask.shape[0]):
        one = model.generate(**alone(inputs, mask, row, model), **kwargs)
        start = 0 if seq2seq else mask.shape[1]  # decoder-only: the new tokens after the prompt
        new = one.sequences[0, 0 if seq2seq else int(mask[row].sum()):]
        torch.testing.assert_close(batched.sequences[row, start:], new, **EXACT, msg=f"row {row}")
        if num_beams == 1:
            for step, (a, b) in enumerate(zip(batched.logits, one.logits, strict=True)):
                torch.testing.assert_close(a[row], b[0], **CLOSE, msg=f"row {row}, step {step}")


@cases(contract.GENERATIVE, kernels=False)
def test_greedy_search_and_one_beam_take_the_argmax_of_a_full_pass_at_each_step(model_class, variant, kernel):
    """Greedy search (and `num_beams=1`, which transformers runs as greedy) appends, step after step, the argmax of a
    full pass over what it has so far."""
    model = head(model_class, variant)
    model.generation_config.eos_token_id = None
    seq2seq = model_class in contract.SEQ2SEQ
    inputs = prompt(model)
    kwargs = dict(max_new_tokens=6, pad_token_id=0)
    greedy, one_beam = model.generate(**inputs, **kwargs, do_sample=False), model.generate(**inputs, **kwargs,
                                                                                           num_beams=1)
    context = inputs if seq2seq else {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
    decoded = torch.full((2, 1), model.config.decoder_start_token_id) if seq2seq else inputs["input_ids"]
    mask = None if seq2seq else inputs["attention_mask"]
    for _ in range(6):
        given = {"decoder_input_ids": decoded} if seq2seq else {  # positions from the mask, as generate() gives them
            "input_ids": decoded, "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)}
        logits = model(**context, **given, use_cache=False).logits
        decoded = torch.cat([decoded, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        mask = None if seq2seq else torch.cat([mask, torch.ones(2, 1, dtype=mask.dtype)], dim=1)
    torch.testing.assert_close(greedy, decoded, **EXACT)
    torch.testing.assert_close(one_beam, decoded, **EXACT)


@cases(contract.GENERATIVE, kernels=False)
@pytest.mark.parametrize("num_beams", [1, 3])
def test_the_decoding_steps_of_generate_read_nothing_back_in_lineage_code(model_class, variant, kernel, num_beams):
    """A decoding step takes the token the model chose: Lineage's forward reads none of its values back (on an
    accelerator each read waits for the device, once per token), where the first forward checks the prompt, nor do
    transformers' mask functions it calls (the padding of the prompt, of the source, stays to the end: the masks are not
    tested for it again, `masks.decoding`). Six more steps (8 new tokens against 2) add the one read a step of
    transformers' own loop (`generation/utils.py`: its stopping test, beam search's bookkeeping), and none elsewhere."""
    model = head(model_class, variant)
    model.generation_config.eos_token_id = None
    reads = []
    for new_tokens in (2, 8):
        with HostReads() as counter:
            model.generate(**prompt(model), max_new_tokens=new_tokens, num_beams=num_beams, pad_token_id=0)
        reads.append(counter.reads["setup"])
    assert [origin for origin in reads[0] if origin[0].startswith("modeling/")], "the first forward checks the prompt"
    added = {origin: n - reads[0][origin] for origin, n in reads[1].items() if n != reads[0][origin]}
    assert {where for where, _ in added} == {"utils.py"} and sum(added.values()) == 6, added


# the RNN refuses assisted generation (test_modeling_lineage_rnn.py): its recurrent state cannot be cropped
ASSISTED = [c for c in contract.GENERATIVE if contract.family(c) != "Rnn"]


def wrong_assistant(model):
    """A copy of `model` whose every draft is rejected (it proposes the token after the model's choice): the model's
    cache is cropped past it at every step."""
    assistant = copy.deepcopy(model)

    def next_token(module, args, output):
        output.logits = output.logits.roll(1, dims=-1)
        return output

    assistant.register_forward_hook(next_token)
    return assistant


ASSISTANCE = {"itself": lambda model: model,  # every draft accepted
              "wrong": wrong_assistant,
              "prompt-lookup": None}


@cases(ASSISTED, kernels=False)
@pytest.mark.parametrize("assistance", ASSISTANCE)
def test_assisted_generation_gives_the_greedy_tokens(model_class, variant, kernel, assistance):
    """Assisted decoding (an assistant model's drafts, or n-grams looked up in the prompt, checked in one forward of
    several tokens over the cache, the cache cropped past the first rejected one) gives greedy search's tokens."""
    model = head(model_class, variant)
    model.generation_config.eos_token_id = None
    inputs = {key: value[:1] for key, value in prompt(model).items()}  # transformers assists one row at a time
    inputs["input_ids"][0, 3:] = inputs["input_ids"][0, :3]  # a repeated n-gram for the prompt lookup to find
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    greedy = model.generate(**inputs, **kwargs)
    make_assistant = ASSISTANCE[assistance]
    assist = dict(prompt_lookup_num_tokens=3) if make_assistant is None else dict(assistant_model=make_assistant(model))
    key = "decoder_input_ids" if model_class in contract.SEQ2SEQ else "input_ids"
    fed = []
    hook = model.register_forward_pre_hook(lambda _, args, kw: fed.append(kw[key].shape[1]), with_kwargs=True)
    assisted = model.generate(**inputs, **kwargs, **assist)
    hook.remove()
    first = 1 if model_class in contract.SEQ2SEQ else inputs["input_ids"].shape[1]  # the decoder's start, the prompt
    assert fed[0] > first or max(fed[1:]) > 1, f"no draft was checked: tokens fed per forward {fed}"
    torch.testing.assert_close(assisted, greedy, **EXACT)


def character_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A tokenizer of one character a token, a distinct one for each of the tiny presets' ids: a stop string of one
    character names one token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    characters = (string.ascii_letters + string.digits + string.punctuation + "αβγδεζηθ")[:contract.V]
    backend = Tokenizer(models.WordLevel({c: i for i, c in enumerate(characters)}, unk_token=characters[0]))
    backend.pre_tokenizer, backend.decoder = pre_tokenizers.Split("", "isolated"), decoders.Fuse()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend)


@cases(contract.GENERATIVE, kernels=False)
def test_a_stop_string_ends_the_generation_at_its_token(model_class, variant, kernel):
    """`stop_strings=` with the `tokenizer=` that `generate()` needs to read them (handed on to the decoding loop
    among the model's inputs, and dropped before the forward): greedy search's tokens, up to and including the
    first that spells the stop string."""
    model = head(model_class, variant)
    model.generation_config.eos_token_id = None
    inputs = {key: value[:1] for key, value in prompt(model).items()}
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    greedy = model.generate(**inputs, **kwargs)
    start = greedy.shape[1] - 8
    new = greedy[0, start:].tolist()
    stop = new[2]
    tokenizer = character_tokenizer()
    stopped = model.generate(**inputs, **kwargs, stop_strings=[tokenizer.decode([stop])], tokenizer=tokenizer)
    torch.testing.assert_close(stopped, greedy[:, :start + new.index(stop) + 1], **EXACT)


@cases(contract.GENERATIVE, kernels=False)
def test_generating_from_inputs_embeds_gives_the_ids_tokens(model_class, variant, kernel):
    """`generate(inputs_embeds=...)`, the embeddings of the prompt's ids: greedy search's new tokens from the ids (a
    decoder-only model returns the new tokens alone, as transformers' do)."""
    model = head(model_class, variant)
    model.generation_config.eos_token_id = None
    inputs = prompt(model)
    kwargs = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    greedy = model.generate(**inputs, **kwargs)
    ids = inputs.pop("input_ids")
    embedded = model.generate(inputs_embeds=model.get_input_embeddings()(ids), **inputs, **kwargs)
    torch.testing.assert_close(embedded, greedy[:, -embedded.shape[1]:], **EXACT)
    if model_class not in contract.SEQ2SEQ:
        assert embedded.shape[1] == 5


def prompt(model) -> dict:
    """A generation prompt of two rows: decoder-only left-padded, seq2seq with a right-padded source (and BERT as a
    decoder over its encoder memory)."""
    seq2seq = type(model) in contract.SEQ2SEQ
    inputs, _ = padded_batch(model, side="right" if seq2seq else "left", lengths=(6, 4))
    return {k: v for k, v in inputs.items() if k not in ("decoder_input_ids", "token_type_ids")}


def auto_class(model_class):
    """The first Auto class that registers `model_class`."""
    return getattr(transformers, next(a for a, n in model_class.auto_classes.items() if n == model_class.__name__))


def tied(model) -> set[frozenset[str]]:
    """Groups of parameter names that share one tensor."""
    names = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return {frozenset(group) for group in names.values() if len(group) > 1}


@cases(contract.HEADS, kernels=False)
def test_save_and_load_round_trip_exactly_for_every_head(model_class, variant, kernel, tmp_path):
    """Through the head's Auto class: the same class, config (only the architecture), weights, ties, outputs bit for
    bit and generated tokens."""
    model = head(model_class, variant)
    inputs, labels = contract.inputs_and_labels(model_class)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    loaded = auto_class(model_class).from_pretrained(tmp_path).eval()
    assert type(loaded) is model_class
    fields, loaded_fields = model.config.to_dict(), loaded.config.to_dict()
    assert "sparse_prediction" not in loaded_fields and "unpad_inputs" not in loaded_fields
    assert loaded_fields.pop("_name_or_path") == str(tmp_path) and fields.pop("_name_or_path", "") == ""
    assert loaded_fields == fields
    state, loaded_state = model.state_dict(), loaded.state_dict()
    assert state.keys() == loaded_state.keys() and all(torch.equal(state[k], loaded_state[k]) for k in state)
    assert tied(loaded) == tied(model)
    for parameter in loaded.parameters():  # loaded weights may sit at unaligned addresses, where MKL rounds
        parameter.data = parameter.data.clone()  # differently (1e-9): the same bits in fresh memory
    expected, actual = contract.tensors(model(**inputs, **labels).to_tuple()), contract.tensors(
        loaded(**inputs, **labels).to_tuple())
    assert len(actual) == len(expected) > 0
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, **EXACT)
    if model.can_generate():
        kwargs = dict(prompt(model), max_new_tokens=6, num_beams=3, pad_token_id=0)
        torch.testing.assert_close(loaded.generate(**kwargs), model.generate(**kwargs), **EXACT)


@cases(contract.HEADS, kernels=False)
def test_resize_token_embeddings_grows_every_matrix_with_a_row_per_token(model_class, variant, kernel):
    """`resize_token_embeddings(n)`: every matrix or bias with a row per token (each side's embedding, the output
    layer; no other dimension of the tiny presets is their 99 rows) gets n rows and keeps its old ones, the ties
    stay, and the new token's id runs on every input side."""
    model = head(model_class, variant)
    rows, ties = model.config.padded_vocab_size, tied(model)
    before = {name: p.detach().clone() for name, p in model.named_parameters(remove_duplicate=False)
              if p.shape[0] == rows}
    embedding = model.get_input_embeddings().weight
    assert {name for name, p in model.named_parameters(remove_duplicate=False) if p is embedding} <= before.keys()
    model.resize_token_embeddings(rows + 11, pad_to_multiple_of=1)
    after = dict(model.named_parameters(remove_duplicate=False))
    for name, old in before.items():
        assert after[name].shape == (rows + 11, *old.shape[1:]), name
        torch.testing.assert_close(after[name][:rows], old, **EXACT, msg=name)
    assert tied(model) == ties and model.config.vocab_size == rows + 11
    inputs, labels = contract.inputs_and_labels(model_class)
    for key in ("input_ids", "decoder_input_ids"):
        if key in inputs:
            inputs[key][..., 1] = rows + 10
    outputs = contract.tensors(model(**inputs, **labels).to_tuple())
    assert outputs and all(torch.isfinite(t.float()).all() for t in outputs)


def test_every_head_saved_with_its_code_loads_and_runs_in_a_process_without_this_project(tmp_path):
    """`trust_remote_code` from a saved folder, in a process where `modeling` cannot be imported: every Auto class a
    family registers builds its head from the folder, and every head (under its family's last variant) gives the
    outputs (within 1e-6: another thread count) and the greedy and beam-search tokens it gave before saving."""
    heads = []
    for model_class in contract.HEADS:
        model = head(model_class, VARIANTS[contract.family(model_class)][-1])
        folder = tmp_path / model_class.__name__
        model.save_pretrained(folder)
        inputs = contract.unlabelled_inputs(model_class)
        expected = {"inputs": inputs, "outputs": named_outputs(model(**inputs))}
        if model.can_generate():
            model.generation_config.eos_token_id = None
            expected["prompt"] = prompt(model)
            expected["greedy"] = model.generate(**expected["prompt"], max_new_tokens=6, pad_token_id=0)
            expected["beam"] = model.generate(**expected["prompt"], max_new_tokens=6, num_beams=3, pad_token_id=0)
        torch.save(expected, tmp_path / f"{model_class.__name__}.pt")
        family_first = not any(contract.family(h) == contract.family(model_class) for h, _, _ in heads)
        autos = sorted(model.auto_classes) if family_first else [auto_class(model_class).__name__]
        heads.append((model_class, str(folder), autos))
    code = f"""
import torch, transformers
load = lambda auto, folder: getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True).eval()
for name, folder, autos in {[(c.__name__, f, a) for c, f, a in heads]!r}:
    built = {{auto: type(load(auto, folder)) for auto in autos}}
    assert all(c.__module__.startswith("transformers_modules") for c in built.values()), built
    model = load(next(auto for auto in autos if built[auto].__name__ == name), folder)
    expected = torch.load(folder + ".pt", weights_only=True)
    out = model(**expected["inputs"])
    assert expected["outputs"]
    for key, value in expected["outputs"].items():
        torch.testing.assert_close(out[key], value, rtol=0, atol=1e-6, msg=name + " " + key)
    if "greedy" in expected:
        assert torch.equal(model.generate(**expected["prompt"], max_new_tokens=6, pad_token_id=0), expected["greedy"])
        assert torch.equal(model.generate(**expected["prompt"], max_new_tokens=6, num_beams=3, pad_token_id=0),
                           expected["beam"])
    print("ok", name, *sorted(c.__name__ for c in built.values()))
"""
    lines = run_clean_process(code, tmp_path).splitlines()
    assert [line.split()[1] for line in lines if line.startswith("ok ")] == [c.__name__ for c in contract.HEADS]
    for model_class, _, autos in heads:
        if len(autos) > 1:  # the folder of the family's first head: every head of the family
            line = next(line for line in lines if line.startswith(f"ok {model_class.__name__} "))
            assert set(line.split()[2:]) == set(model_class.auto_classes.values())


@cases(contract.HEADS, kernels=False)
@pytest.mark.parametrize("reentrant", ["default", "reentrant"])
def test_gradient_checkpointing_recomputes_each_layer_and_gives_the_same_gradients(model_class, variant, kernel,
                                                                                  reentrant):
    """Every layer that checkpoints runs again in the backward pass, and the gradients are bit for bit those without
    checkpointing; a family that cannot checkpoint says so."""
    model = head(model_class, variant).train()
    inputs, labels = contract.inputs_and_labels(model_class)
    if not model.supports_gradient_checkpointing:
        with pytest.raises(ValueError, match="does not support activation checkpointing"):
            model.activation_checkpointing_enable()
        return
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    calls = []  # which layer's modules ran: transformers checkpoints a layer's forward, inside the layer's own hooks
    hooks = [child.register_forward_hook(lambda *_, i=i: calls.append(i)) for i, layer in enumerate(layers)
             for child in layer.children()]
    contract.scalar(model(**inputs, **labels)).backward()
    plain, once = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, calls.copy()
    model.zero_grad(set_to_none=True)
    model.activation_checkpointing_enable(
        **({} if reentrant == "default" else {"activation_checkpointing_kwargs": {"use_reentrant": True}}))
    assert layers and all(layer.gradient_checkpointing for layer in layers)
    calls.clear()
    contract.scalar(model(**inputs, **labels)).backward()
    for hook in hooks:
        hook.remove()
    for i in range(len(layers)):  # the backward pass ran each layer again (up to the last tensor it needed)
        assert calls.count(i) > once.count(i) > 0, i
    checkpointed = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert checkpointed.keys() == plain.keys() and plain
    # bit for bit, but for the Transformer, whose encoder output feeds every decoder layer: its gradients add up in the
    # order the backward pass reaches them
    tolerance = {"rtol": 1e-6, "atol": 1e-6} if contract.family(model_class) == "Transformer" else EXACT
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, **tolerance, msg=name)


# ----------------------------------------------------------------------------------------------------------
# Static caches, compilation, sampling, and what the output flags return
# ----------------------------------------------------------------------------------------------------------

STATIC = [c for c in contract.GENERATIVE if c._can_compile_fullgraph]  # the RNN's recurrent state has no static form
BASES = [LineageBertModel, LineageGptModel, LineageTransformerModel]


def first_cases(heads):
    """Like `cases(heads, kernels=False)`, on each family's preset (and each head's own variants) only."""
    params = []
    for model_class in heads:
        for variant in VARIANTS[contract.family(model_class)][:1] + HEAD_VARIANTS.get(model_class, ()):
            label = "-".join(str(v) for v in variant.values()) or "preset"
            params.append(pytest.param(model_class, variant, None, id=f"{model_class.__name__}-{label}"))
    return pytest.mark.parametrize("model_class, variant, kernel", params)


def static_layers(cache) -> bool:
    cache = getattr(cache, "self_attention_cache", cache)
    return isinstance(cache, transformers.StaticCache)


@cases(STATIC, kernels=False)
@pytest.mark.parametrize("num_beams", [1, 3])
def test_a_static_cache_generates_what_the_dynamic_cache_generates(model_class, variant, kernel, num_beams):
    """Greedy and beam search over a fixed-size cache (4D masks over its empty slots) give the tokens and, within
    1e-5, the logits of every step that the dynamic cache gives, on a padded batch of prompts."""
    model = head(model_class, variant)
    model.generation_config.eos_token_id = None
    kwargs = dict(prompt(model), max_new_tokens=6, num_beams=num_beams, do_sample=False, pad_token_id=0,
                  return_dict_in_generate=True, output_logits=True)
    dynamic = model.generate(**kwargs)
    static = model.generate(**kwargs, cache_implementation="static")
    assert static_layers(output_cache(static)) and not static_layers(output_cache(dynamic))
    torch.testing.assert_close(static.sequences, dynamic.sequences, **EXACT)
    assert len(static.logits) == len(dynamic.logits) == 6
    for step, (a, b) in enumerate(zip(static.logits, dynamic.logits)):
        torch.testing.assert_close(a, b, **CLOSE, msg=f"logits at step {step}")


def recording_backend(graphs: list):
    """A `torch.compile` backend that records each graph it is given and runs it as traced (no inductor: fast)."""
    def backend(graph, example_inputs):
        graphs.append(graph)
        return graph.forward
    return backend


def compile_cases():
    """Compilation is slow: each family's base model on its preset under sdpa; each head that generates on its
    preset under both kernels, and under its family's last variant (GPT, BERT: pre-norm; the Transformer: the split
    sinusoids) and its own variants under sdpa."""
    params = [pytest.param(c, {}, "sdpa", id=f"{c.__name__}-preset-sdpa") for c in BASES]
    for model_class in STATIC:
        name = contract.family(model_class)
        runs = [(VARIANTS[name][0], kernel) for kernel in KERNELS] + [
            (variant, "sdpa") for variant in VARIANTS[name][-1:] + HEAD_VARIANTS.get(model_class, ())]
        for variant, kernel in runs:
            label = "-".join(str(v) for v in variant.values()) or "preset"
            params.append(pytest.param(model_class, variant, kernel, id=f"{model_class.__name__}-{label}-{kernel}"))
    return pytest.mark.parametrize("model_class, variant, kernel", params)


@compile_cases()
def test_the_forward_and_static_cache_decoding_compile_with_fullgraph(model_class, variant, kernel):
    """`torch.compile(fullgraph=True)` (a graph break raises) of each attention family's base model and of each head
    that generates gives the eager outputs; generate() with a static cache compiles its decoding step and gives the
    eager tokens. Inductor's compilation is the families' slow tests'."""
    torch._dynamo.reset()  # each case compiles afresh: the family's forward recompiles past dynamo's limit otherwise
    model = head(model_class, variant, kernel)
    assert model._can_compile_fullgraph
    inputs, _ = padded_batch(model)
    graphs = []
    compiled = torch.compile(model, fullgraph=True, backend=recording_backend(graphs))
    expected, actual = named_outputs(model(**inputs)), named_outputs(compiled(**inputs))
    assert graphs and expected.keys() == actual.keys() and expected
    for key, value in actual.items():
        torch.testing.assert_close(value, expected[key], **CLOSE, msg=key)
    if not model.can_generate():
        return
    model.generation_config.eos_token_id = None
    kwargs = dict(prompt(model), max_new_tokens=5, do_sample=False, pad_token_id=0, cache_implementation="static")
    graphs.clear()
    config = transformers.CompileConfig(fullgraph=True, backend=recording_backend(graphs), mode=None, dynamic=False)
    config._compile_all_devices = True  # generate() compiles on accelerators only unless told otherwise
    tokens_compiled = model.generate(**kwargs, compile_config=config)
    assert graphs, "generate() did not compile the decoding step"
    torch.testing.assert_close(tokens_compiled, model.generate(**kwargs), **EXACT)


SAMPLINGS = {"temperature": {"temperature": 0.7}, "top_k": {"top_k": 5}, "top_p": {"top_p": 0.9},
             "all": {"temperature": 1.3, "top_k": 10, "top_p": 0.8}}


@first_cases(contract.GENERATIVE)
@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_seeded_sampling_is_reproducible_and_top_k_one_is_greedy(model_class, variant, kernel, sampling):
    """The same seed gives the same tokens, other seeds other tokens, every one in the vocabulary and after the
    prompt; top-k sampling with k=1 is greedy search."""
    model = head(model_class, variant)
    model.generation_config.eos_token_id = None
    given = prompt(model)
    seq2seq = model_class in contract.SEQ2SEQ

    def sample(seed: int, **kwargs) -> torch.Tensor:
        torch.manual_seed(seed)
        return model.generate(**given, max_new_tokens=12, pad_token_id=0, **{"do_sample": True, **kwargs})

    first = sample(1, **SAMPLINGS[sampling])
    start = 1 if seq2seq else given["input_ids"].shape[1]  # the decoder start token, or the prompt
    assert first.shape == (2, start + 12)
    if not seq2seq:
        assert torch.equal(first[:, :start], given["input_ids"])
    assert int(first.min()) >= 0 and int(first.max()) < contract.V
    assert torch.equal(first, sample(1, **SAMPLINGS[sampling]))
    assert any(not torch.equal(first, sample(seed, **SAMPLINGS[sampling])) for seed in (2, 3, 4))
    torch.testing.assert_close(sample(5, top_k=1), sample(6, do_sample=False), **EXACT)


def flag_outputs(output) -> dict[str, tuple]:
    """The tuples the output flags add (hidden states and attentions of each stack), by name (BERT without cross
    attention returns an empty `cross_attentions`)."""
    return {k: v for k, v in output.items()
            if isinstance(v, tuple) and v and k.endswith(("hidden_states", "attentions"))}


def embeddings(model, inputs: dict) -> dict[str, torch.Tensor]:
    """What each stack's first hidden state must be, computed from the family's embedding modules: BERT's words,
    positions and segments; GPT's words and positions counted from the first real token (left padding); the
    Transformer's (scaled) words and positions, for the source and the target through the shared table."""
    base, name = model.base_model, contract.family(type(model))
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    if isinstance(model, MULTIPLE_CHOICE):
        ids, mask = ids.flatten(0, 1), mask.flatten(0, 1)
    if name == "Bert":
        segments = inputs["token_type_ids"].flatten(0, -2) if "token_type_ids" in inputs else None
        return {"hidden_states": base.embeddings(ids, segments, None, None)}
    if name == "Gpt":
        return {"hidden_states": base.embed_tokens(ids) + base.embed_positions((mask.cumsum(-1) - 1).clamp(min=0))}
    encoder, decoder = base.encoder, base.decoder
    return {"encoder_hidden_states": encoder.embed(encoder.embed_tokens(ids)),
            "decoder_hidden_states": decoder.embed(encoder.embed_tokens(inputs["decoder_input_ids"]))}


def check_attentions(name: str, weights: torch.Tensor, model, inputs: dict, mask: torch.Tensor, side: str) -> None:
    """(rows, H, queries, keys) weights: rows of one, nothing on a padded key, nothing on a later key in a decoder's
    self-attention, at every query (left padding: at the real ones; a padding query that sees no real key is each
    kernel's own)."""
    seq2seq, rows, width = type(model) in contract.SEQ2SEQ, mask.shape[0], mask.shape[1]
    heads = model.config.num_attention_heads
    query_real = mask.bool() if side == "left" else torch.ones_like(mask, dtype=torch.bool)
    if name == "cross_attentions":
        keys = mask if seq2seq else inputs["encoder_attention_mask"]
        queries = TARGET if seq2seq else width
        query_real = torch.ones(rows, TARGET, dtype=torch.bool) if seq2seq else query_real
    elif name == "decoder_attentions":
        keys, queries, query_real = torch.ones(rows, TARGET), TARGET, torch.ones(rows, TARGET, dtype=torch.bool)
    else:
        keys, queries = mask, width
    assert weights.shape == (rows, heads, queries, keys.shape[1]), name
    real = weights.transpose(1, 2)[query_real]  # (real queries, H, keys)
    torch.testing.assert_close(real.sum(-1), torch.ones(real.shape[:2]), **CLOSE, msg=name)
    padded_keys = (keys[:, None, None, :] == 0) & query_real[:, None, :, None]  # (rows, 1, queries, keys)
    assert padded_keys.any() or name == "decoder_attentions", name  # a target is never padded here
    assert torch.all(weights[padded_keys.expand_as(weights)] == 0), name
    causal = name == "decoder_attentions" or (name == "attentions" and model_class_is_causal(model))
    if causal:
        assert torch.all(weights.triu(diagonal=1)[query_real[:, None, :, None].expand_as(weights)] == 0), name


def model_class_is_causal(model) -> bool:
    return contract.family(type(model)) == "Gpt" or (contract.family(type(model)) == "Bert"
                                                    and model.config.is_decoder)


def check_flag_outputs(model, model_class, inputs, mask, side, named: dict) -> None:
    """Layers + 1 hidden states per stack, the first the embeddings; one attention map per layer and attention."""
    layers, seq2seq = model.config.num_hidden_layers, model_class in contract.SEQ2SEQ
    expected_names = ({"encoder_hidden_states", "decoder_hidden_states", "encoder_attentions",
                       "decoder_attentions", "cross_attentions"} if seq2seq else
                      {"hidden_states", "attentions"} | ({"cross_attentions"} if getattr(
                          model.config, "add_cross_attention", False) else set()))
    assert named.keys() == expected_names
    real = mask.bool()
    for name, first in embeddings(model, inputs).items():
        states = named[name]
        assert len(states) == layers + 1, name
        query_real = real if name != "decoder_hidden_states" else torch.ones(first.shape[:2], dtype=torch.bool)
        assert [s.shape for s in states] == [first.shape] * (layers + 1), name
        torch.testing.assert_close(states[0][query_real], first[query_real], **CLOSE, msg=f"{name} 0")
        assert not torch.allclose(states[1], states[2]), name  # one entry per layer, not repeats
    for name in expected_names - set(embeddings(model, inputs)):
        assert len(named[name]) == layers, name
        for weights in named[name]:
            check_attentions(name, weights, model, inputs, mask, side)


def check_the_base_models_outputs(model, model_class, inputs, flags: dict, out, named: dict) -> None:
    """The head returns its base model's states and maps (multiple choice: one row per choice), also in its tuple."""
    seq2seq = model_class in contract.SEQ2SEQ
    base_inputs = {k: v.flatten(0, 1) if isinstance(model, MULTIPLE_CHOICE) and v.dim() == 3 else v
                   for k, v in inputs.items()}
    base = model.base_model(**base_inputs, **flags)
    for name, states in flag_outputs(base).items():
        for a, e in zip(named[name], states, strict=True):
            torch.testing.assert_close(a, e, **EXACT, msg=name)
    torch.testing.assert_close(named["decoder_hidden_states" if seq2seq else "hidden_states"][-1],
                               base.last_hidden_state, **EXACT)
    if seq2seq:
        torch.testing.assert_close(named["encoder_hidden_states"][-1], base["encoder_last_hidden_state"], **EXACT)
    if getattr(model, "lm_head", None) is not None and contract.family(model_class) in ("Gpt", "Transformer"):
        bias = getattr(model, "final_logits_bias", None)
        logits = model.lm_head(base.last_hidden_state) + (0 if bias is None else bias)
        torch.testing.assert_close(out.logits, logits, rtol=0, atol=1e-6)
    as_tuple = model(**inputs, **flags, return_dict=False)
    expected_tensors, actual_tensors = contract.tensors(out.to_tuple()), contract.tensors(as_tuple)
    assert len(actual_tensors) == len(expected_tensors)
    for a, e in zip(actual_tensors, expected_tensors):
        torch.testing.assert_close(a, e, **EXACT)


def check_flags_from_the_config_and_none(model, kernel_name: str, inputs, mask, side, out, named: dict) -> None:
    """The config's flags do what the keywords do, a keyword overrides them, and without flags nothing comes back
    (the other outputs as with the flags, at the real positions: flags may take another kernel path)."""
    if kernel_name == "eager":  # transformers refuses `output_attentions` in an sdpa model's config
        model.config.output_hidden_states = model.config.output_attentions = True
        from_config = flag_outputs(model(**inputs))
        assert {k: len(v) for k, v in from_config.items()} == {k: len(v) for k, v in named.items()}
        assert flag_outputs(model(**inputs, output_attentions=False, output_hidden_states=False)) == {}
        model.config.output_hidden_states = model.config.output_attentions = False
    plain = model(**inputs)
    assert flag_outputs(plain) == {}
    for key, value in named_outputs(out).items():
        kept = mask.bool() if side == "left" and value.dim() >= 2 and value.shape[1] == mask.shape[1] else slice(None)
        torch.testing.assert_close(plain[key][kept], value[kept], **CLOSE, msg=key)


@cases(ATTENTION_HEADS, kernels=False, sides=True)
def test_output_flags_return_every_layer_from_the_embeddings_under_both_kernels(model_class, variant, kernel, side):
    """`output_hidden_states` gives layers + 1 states per stack, the first the embeddings, the last the stack's
    output; `output_attentions` one (rows, H, queries, keys) map per layer and attention, each row a distribution
    over the real keys (and the earlier ones in a decoder); the head returns its base model's (multiple choice: one
    row per choice), also in its tuple; the config's flags do the same, a keyword overrides them, and without flags
    nothing is returned. Eager and sdpa give the same states and maps (at the real positions)."""
    models = {k: head(model_class, variant, k) for k in KERNELS}
    models["sdpa"].load_state_dict(models["eager"].state_dict())
    inputs, mask = padded_batch(models["eager"], side)
    flags = dict(output_attentions=True, output_hidden_states=True)
    found = {}
    for kernel_name, model in models.items():
        out = model(**inputs, **flags)
        found[kernel_name] = named = flag_outputs(out)
        check_flag_outputs(model, model_class, inputs, mask, side, named)
        check_the_base_models_outputs(model, model_class, inputs, flags, out, named)
        check_flags_from_the_config_and_none(model, kernel_name, inputs, mask, side, out, named)
    real = mask.bool()  # left padding: a padding query that sees no real key is each kernel's own
    assert found["sdpa"].keys() == found["eager"].keys()
    for name, values in found["sdpa"].items():
        for layer, (a, e) in enumerate(zip(values, found["eager"][name], strict=True)):
            if side == "left":
                a, e = (a[real], e[real]) if a.dim() == 3 else (a.transpose(1, 2)[real], e.transpose(1, 2)[real])
            torch.testing.assert_close(a, e, **CLOSE, msg=f"{name} {layer}")


# ----------------------------------------------------------------------------------------------------------
# Parity with the transformers reference under copied weights, for every head that has one
# ----------------------------------------------------------------------------------------------------------
# Every pair modeling.conversion supports (a pair it adds joins here), both ways, with padding, under eager and sdpa;
# the tiny references and their inputs are test_conversion*.py's.

GENERATING_CONVERSIONS = [c for c in CONVERSIONS if c.lineage_class.can_generate()]


def reference_family(conversion) -> str:
    return next(f for f in ("Bert", "OpenAIGPT", "GPT2", "Marian") if conversion.reference_class.__name__.startswith(f))


def reference_model(conversion, kernel: str = "sdpa", **overrides) -> torch.nn.Module:
    """A tiny reference with random weights off their initial values (BERT, GPT) or a random logits bias (Marian)."""
    name, family = conversion.reference_class.__name__, reference_family(conversion)
    if name == "BertLMHeadModel":
        return bert_conversion.reference_bert_decoder(kernel)
    if family == "Bert":
        return bert_conversion.reference_bert(name, kernel)
    if family == "Marian":
        return marian_conversion.marian(conversion.reference_class, kernel, **overrides)
    kernel = kernel if conversion.reference_class._supports_sdpa else "eager"  # OpenAIGPT: eager only
    return gpt_conversion.reference_model(family, name.removeprefix(family), attn_implementation=kernel, **overrides)


def reference_examples(conversion):
    """(inputs, what the reference is given besides, {length: real positions} of the per-token outputs compared at
    real positions only) for each padding the pair is compared under."""
    family = reference_family(conversion)
    if family == "Bert":
        inputs = bert_conversion.bert_inputs()
        if conversion.reference_class.__name__ != "BertLMHeadModel":  # every position, padding included
            return [(inputs, {}, {})]
        memory = {"encoder_hidden_states": torch.randn(3, 6, 32), "encoder_attention_mask": torch.ones(3, 6)}
        memory["encoder_attention_mask"][1, 4:] = 0
        return [({**inputs, **memory}, {}, {11: inputs["attention_mask"].bool()})]
    if family == "Marian":
        inputs = marian_conversion.batch()
        return [(inputs, {}, {9: inputs["attention_mask"].bool()})]  # the source's real positions; every target one
    examples = []
    # left padding: both references number positions 0..T-1 unless given the mask's count of real tokens (as their
    # generate() gives it); Lineage counts them itself (docs/models.md, departures)
    for side in ("right", "left"):
        ids, mask = gpt_conversion.padded_batch(side)
        positions = {"position_ids": (mask.cumsum(-1) - 1).clamp(min=0)} if side == "left" else {}
        examples.append(({"input_ids": ids, "attention_mask": mask}, positions, {10: mask.bool()}))
    return examples


def assert_same_outputs(actual, expected, keep: dict) -> None:
    keys = [k for k, v in expected.items() if isinstance(v, torch.Tensor)]
    assert keys
    for key in keys:
        a, e = actual[key], expected[key]
        if e.dim() >= 2 and e.shape[1] in keep:
            a, e = a[keep[e.shape[1]]], e[keep[e.shape[1]]]
        torch.testing.assert_close(a, e, **CLOSE, msg=key)


def compare(model, reference, conversion) -> None:
    """`model` (Lineage, or a reference converted back) gives `reference`'s outputs."""
    with torch.no_grad():
        for inputs, reference_only, keep in reference_examples(conversion):
            if isinstance(model, conversion.reference_class):  # the reference converted back: every position
                given, keep = reference_only, {}
            else:
                given = {}
            assert_same_outputs(model(**inputs, **given), reference(**inputs, **reference_only), keep)


conversion_ids = pytest.mark.parametrize("conversion", CONVERSIONS, ids=lambda c: c.reference_class.__name__)


@conversion_ids
@pytest.mark.parametrize("kernel", KERNELS)
def test_a_reference_converts_to_lineage_and_back_with_the_same_outputs(conversion, kernel):
    reference = reference_model(conversion, kernel)
    lineage = from_transformers(reference)
    assert type(lineage) is conversion.lineage_class and conversion.takes_lineage_config(lineage.config)
    if reference.config._attn_implementation == kernel:
        assert lineage.config._attn_implementation == kernel
    lineage.set_attn_implementation(kernel)
    compare(lineage, reference, conversion)
    back = to_transformers(lineage)
    assert type(back) is conversion.reference_class
    compare(back, reference, conversion)
    state, back_state = reference.state_dict(), back.state_dict()
    assert state.keys() == back_state.keys() and all(torch.equal(state[k], back_state[k]) for k in state)


def reference_labels(conversion, inputs: dict) -> dict:
    """Labels of the reference head (none for a bare model): its tuple then starts with the loss."""
    name, ids = conversion.reference_class.__name__, inputs["input_ids"]
    rows = ids.shape[0]
    tokens = ids.masked_fill(inputs["attention_mask"] == 0, -100)
    if name == "MarianMTModel":
        return {"labels": torch.randint(1, 98, inputs["decoder_input_ids"].shape)}
    if name == "BertForPreTraining":
        return {"labels": tokens, "next_sentence_label": torch.arange(rows) % 2}
    if name.endswith("LMHeadModel"):  # not a first token: left-padded, a padding query (a kernel's own) predicts it
        return {"labels": tokens.masked_fill(inputs["attention_mask"].cumsum(-1) <= 1, -100)}
    if name.endswith("MaskedLM"):
        return {"labels": tokens}
    if name.endswith("SequenceClassification"):
        return {"labels": torch.arange(rows) % 2}
    if name.endswith("TokenClassification"):
        return {"labels": tokens.clamp(max=1)}
    if name.endswith("QuestionAnswering"):
        return {"start_positions": torch.arange(rows), "end_positions": torch.arange(rows) + 1}
    return {}


@conversion_ids
def test_a_converted_model_returns_the_references_tuple(conversion):
    """`return_dict=False`, labels given: the reference's tuple item for item (its loss, its logits, ...) for as far
    as both hold tensors (a cache object ends the comparison): what a caller unpacking the reference's tuple gets.
    Lineage's extra terms of a loss (BERT's `mlm_loss`, GPT's `lm_loss`) come after the reference's fields."""
    reference = reference_model(conversion)
    lineage = from_transformers(reference)
    for inputs, reference_only, keep in reference_examples(conversion):
        labels = reference_labels(conversion, inputs)
        with torch.no_grad():
            expected = reference(**inputs, **reference_only, **labels, return_dict=False)
            actual = lineage(**inputs, **labels, return_dict=False)
        compared = 0
        for a, e in zip(actual, expected):
            if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)):
                break
            if e.dim() >= 2 and e.shape[1] in keep:
                a, e = a[keep[e.shape[1]]], e[keep[e.shape[1]]]
            torch.testing.assert_close(a, e, **CLOSE, msg=f"item {compared}")
            compared += 1
        assert compared >= (3 if conversion.reference_class.__name__ == "BertForPreTraining" else
                            2 if labels else 1), compared


LINEAGE_OVERRIDES = {"Marian": {"hidden_act": "gelu"}}  # an activation the reference names otherwise


@conversion_ids
@pytest.mark.parametrize("kernel", KERNELS)
def test_lineage_converts_to_the_reference_and_back_with_the_same_outputs(conversion, kernel):
    config = from_transformers(reference_model(conversion, kernel)).config
    for field, value in LINEAGE_OVERRIDES.get(reference_family(conversion), {}).items():
        setattr(config, field, value)
    lineage = conversion.lineage_class(config).eval()
    with torch.no_grad():  # off the initial values, LayerNorms and biases included
        for parameter in lineage.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
        if getattr(lineage, "final_logits_bias", None) is not None:  # a buffer, zero at init
            lineage.final_logits_bias.normal_()
    lineage.set_attn_implementation(kernel)
    reference = to_transformers(lineage).eval()
    assert type(reference) is conversion.reference_class
    compare(lineage, reference, conversion)
    again = from_transformers(reference)
    state, again_state = lineage.state_dict(), again.state_dict()
    assert state.keys() == again_state.keys() and all(torch.equal(state[k], again_state[k]) for k in state)


@pytest.mark.parametrize("conversion, num_beams", [
    (c, beams) for c in GENERATING_CONVERSIONS for beams in ((1, 4) if reference_family(c) == "Marian" else (1,))],
    ids=lambda v: v.reference_class.__name__ if hasattr(v, "reference_class") else f"beams{v}")
def test_generation_gives_the_reference_tokens(conversion, num_beams, exact_linear):
    """Greedy (and beam) search from a converted model give the reference's tokens, and so does the model converted
    back; BERT as a decoder against the reference's greedy choice recomputed over the whole prefix (its own
    generate() gives its cross attention a decoder-only cache)."""
    family = reference_family(conversion)
    reference = reference_model(conversion, **({} if family == "Bert" else {"eos_token_id": None}
                                               if family != "Marian" else {}))
    lineage = from_transformers(reference)
    if family == "Bert":
        inputs, _, _ = reference_examples(conversion)[0]
        memory = {k: v for k, v in inputs.items() if k.startswith("encoder_")}
        decoded = inputs["input_ids"][:, :4]
        generated = lineage.generate(decoded, **memory, max_new_tokens=5, do_sample=False)
        for _ in range(5):
            next_token = reference(decoded, **memory).logits[:, -1].argmax(-1, keepdim=True)
            decoded = torch.cat([decoded, next_token], dim=1)
        assert torch.equal(generated, decoded)
        return
    if family == "Marian":
        inputs = marian_conversion.batch()
        del inputs["decoder_input_ids"]
        prompts, kwargs = [inputs], dict(num_beams=num_beams, length_penalty=0.6, max_new_tokens=12, min_new_tokens=4)
        assert lineage.generation_config.forced_eos_token_id == 0  # the reference's decoding settings travel along
    else:
        prompts, kwargs = [{"input_ids": torch.randint(5, 99, (1, 6))}], dict(max_new_tokens=12, do_sample=False)
        ids, mask = gpt_conversion.padded_batch("left")  # generate() passes both the same positions, from the mask
        prompts.append({"input_ids": ids, "attention_mask": mask})
    for prompt in prompts:
        expected = reference.generate(**prompt, **kwargs)
        assert expected.shape[1] > prompt["input_ids"].shape[1] + 4 or family == "Marian"
        assert torch.equal(lineage.generate(**prompt, **kwargs), expected)
        assert torch.equal(to_transformers(lineage).generate(**prompt, **kwargs), expected)
