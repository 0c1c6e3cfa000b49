"""The RNN encoder-decoder (Sutskever / Bahdanau / Luong): every config combination trains a step, the score
equations against hand computations, alignments, what the recurrent cache keeps, `generate()` (greedy, beam search),
presets, and bad input. Padding, causality, cached decoding against a full pass, generation with and without the
cache, seeded sampling and save/load (also in a clean process) are test_properties.py's, over every cell, attention
and input feeding; bad config values test_contract.py's."""

import pytest
import torch
import transformers
from conftest import preset

from modeling import (
    LineageRnnConfig,
    LineageRnnForConditionalGeneration,
    LineageRnnModel,
    LineageTransformerForConditionalGeneration,
)
from modeling.arguments import CACHE_NAME
from modeling.modeling_lineage_rnn import LineageRnnCache, LineageRnnEncoderOutput

PAD, BOS, EOS = 0, 1, 2  # rnn-tiny: <pad> <s> </s> <unk>, then ordinary tokens
ATTENTIONS = ("none", "bahdanau", "luong-dot", "luong-general", "luong-concat")
CELLS = ("gru", "lstm")
# every attention, with input feeding for the Luong ones (without it they decode the whole target in one call)
DECODERS = [("none", False), ("bahdanau", False), ("luong-dot", False), ("luong-dot", True), ("luong-general", False),
            ("luong-general", True), ("luong-concat", False), ("luong-concat", True)]


def build(model_class=LineageRnnForConditionalGeneration, **overrides):
    """A tiny model in eval mode; `eos_token_id=None` so generation never stops early."""
    return model_class(preset("rnn-tiny", **{"eos_token_id": None, **overrides})).eval()


def tokens(*shape: int) -> torch.Tensor:
    return torch.randint(4, 99, shape)  # never a special token


def sources(lengths=(7, 4, 6)) -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded batch of sources of different lengths: (input_ids, attention_mask)."""
    ids, mask = torch.full((len(lengths), max(lengths)), PAD), torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, length in enumerate(lengths):
        ids[i, :length], mask[i, :length] = tokens(length), 1
    return ids, mask


def record_kernel_calls(model: torch.nn.Module) -> list:
    """Record every call of a leaf module: a check that must fail before any kernel runs leaves the list empty."""
    calls = []
    for module in model.modules():
        if next(module.children(), None) is None:
            module.register_forward_pre_hook(lambda m, args, calls=calls: calls.append(type(m).__name__))
    return calls


# ---------------------------------------------------------------------------------------------- every combination


def _combinations():
    for cell in CELLS:
        for attention in ATTENTIONS:
            for bidirectional in (False, True):
                for feeding in ((False, True) if attention.startswith("luong") else (False,)):
                    yield cell, attention, bidirectional, feeding


@pytest.mark.parametrize("cell, attention, bidirectional, input_feeding", list(_combinations()))
def test_every_combination_builds_and_trains_a_step(cell, attention, bidirectional, input_feeding):
    model = build(cell=cell, attention=attention, bidirectional_encoder=bidirectional,
                  input_feeding=input_feeding).train()
    input_ids, attention_mask = sources()
    labels = tokens(3, 5)
    labels[1, 3:] = -100
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_logits=True)
    assert out.logits.shape == (3, 5, 99) and out.encoder_last_hidden_state.shape == (3, 7, 32)
    assert out.past_key_values is None and torch.isfinite(out.loss)
    out.loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []  # every weight of the combination is used


@pytest.mark.parametrize("bridge", ["none", "last", "linear"])
@pytest.mark.parametrize("cell", CELLS)
def test_bridges_set_the_decoder_initial_state(bridge, cell):
    model = build(LineageRnnModel, bridge=bridge, cell=cell)
    input_ids, attention_mask = sources()
    encoded = model.encode(input_ids, attention_mask)
    state = model.bridge(encoded)
    assert len(state) == (2 if cell == "lstm" else 1) and all(s.shape == (2, 3, 32) for s in state)
    final = encoded.final_hidden.transpose(0, 1)  # (L, B, C): [forward final; backward final] per layer
    if bridge == "linear":
        projection = model.bridge.hidden_proj
        torch.testing.assert_close(state[0], torch.tanh(final @ projection.weight.T + projection.bias))
    else:
        torch.testing.assert_close(state[0], final if bridge == "last" else torch.zeros_like(final))
    # the backward direction's final state is its state at the first token: the top layer's annotation there
    torch.testing.assert_close(encoded.final_hidden[:, -1, 16:], encoded.last_hidden_state[:, 0, 16:])
    forward_last = encoded.last_hidden_state[torch.arange(3), attention_mask.sum(1) - 1, :16]  # at each last token
    torch.testing.assert_close(encoded.final_hidden[:, -1, :16], forward_last)


def test_reverse_source_reads_the_source_backwards_and_answers_in_source_order():
    reversed_model = build(LineageRnnModel, reverse_source=True)
    plain = build(LineageRnnModel)
    plain.load_state_dict(reversed_model.state_dict())
    input_ids, attention_mask = sources()
    lengths = attention_mask.sum(1)
    flipped = input_ids.clone()
    for i, n in enumerate(lengths):
        flipped[i, :n] = input_ids[i, :n].flip(0)
    expected = plain.encode(flipped, attention_mask)
    actual = reversed_model.encode(input_ids, attention_mask)
    for i, n in enumerate(lengths):  # annotation j belongs to source token j
        torch.testing.assert_close(actual.last_hidden_state[i, :n], expected.last_hidden_state[i, :n].flip(0))
    torch.testing.assert_close(actual.final_hidden, expected.final_hidden)


# ---------------------------------------------------------------------------------------------- the equations


def _first_step(attention: str, cell: str = "gru", **fields):
    model = build(LineageRnnModel, attention=attention, cell=cell, **fields)
    input_ids, attention_mask = sources()
    target = tokens(3, 1)
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target, output_attentions=True)
    encoded = model.encode(input_ids, attention_mask)
    return model, encoded, target, attention_mask, out


@pytest.mark.parametrize("cell, maxout_size", [("gru", None), ("lstm", None), ("gru", 5)])
def test_bahdanau_scores_the_previous_state_additively(cell, maxout_size):
    model, encoded, target, mask, out = _first_step("bahdanau", cell, maxout_size=maxout_size)
    score, h = model.decoder.attention, encoded.last_hidden_state  # (B, S, C)
    s0 = model.bridge(encoded)[0][-1]  # s_{t-1} at t = 1: the bridged state of the top layer, (B, C)
    e = torch.tanh(s0[:, None] @ score.query_proj.weight.T + h @ score.key_proj.weight.T) @ score.energy.weight.T
    a = e.squeeze(-1).masked_fill(mask == 0, -torch.inf).softmax(-1)  # (B, S)
    torch.testing.assert_close(out.cross_attentions[0][:, 0, 0], a)
    # the context enters the recurrent step with the previous word
    c = (a[:, None] @ h).squeeze(1)  # (B, C)
    x = torch.cat([model.decoder.embed_tokens(target)[:, 0], c], dim=-1)
    state = model.bridge(encoded)
    s1, _ = model.decoder.rnn(x[:, None], state if cell == "lstm" else state[0])
    readout = model.decoder.readout(torch.cat([s1[:, 0], c, model.decoder.embed_tokens(target)[:, 0]], -1))
    width = maxout_size or 32  # the deep output: pairs of units pooled
    torch.testing.assert_close(out.last_hidden_state[:, 0], readout.view(3, width, 2).max(-1).values)


@pytest.mark.parametrize("attention", ["luong-dot", "luong-general", "luong-concat"])
def test_luong_scores_the_current_state_and_predicts_from_the_attentional_state(attention):
    model, encoded, target, mask, out = _first_step(attention)
    h = encoded.last_hidden_state  # (B, S, C)
    state = model.bridge(encoded)[0]
    ht = model.decoder.rnn(model.decoder.embed_tokens(target), state)[0][:, 0]  # h_t, (B, C)
    score = model.decoder.attention
    if attention == "luong-dot":
        e = (h @ ht[:, :, None]).squeeze(-1)  # h_t^T h_i
    elif attention == "luong-general":
        e = (h @ score.key_proj.weight.T @ ht[:, :, None]).squeeze(-1)  # h_t^T W_a h_i
    else:  # v^T tanh(W_a [h_t; h_i]), W_a = [W_q W_k]
        w_a = torch.cat([score.query_proj.weight, score.key_proj.weight], dim=1)  # (C, 2C)
        pairs = torch.cat([ht[:, None].expand_as(h), h], dim=-1)  # (B, S, 2C)
        e = (torch.tanh(pairs @ w_a.T) @ score.energy.weight.T).squeeze(-1)
    a = e.masked_fill(mask == 0, -torch.inf).softmax(-1)
    torch.testing.assert_close(out.cross_attentions[0][:, 0, 0], a)
    c = (a[:, None] @ h).squeeze(1)
    attentional = torch.tanh(torch.cat([c, ht], -1) @ model.decoder.attention_out.weight.T)  # tanh(W_c [c_t; h_t])
    torch.testing.assert_close(out.last_hidden_state[:, 0], attentional)


def test_input_feeding_feeds_the_previous_attentional_state():
    model = build(LineageRnnModel, attention="luong-general", input_feeding=True)
    input_ids, attention_mask = sources()
    target = tokens(3, 2)
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target)
    assert model.decoder.rnn.input_size == 16 + 32  # embedding + h~_{t-1}
    encoded = model.encode(input_ids, attention_mask)
    cache = LineageRnnCache()
    model.decode(target[:, :1], encoded, attention_mask, cache=cache)
    torch.testing.assert_close(cache.feed, out.last_hidden_state[:, 0])  # h~_1 is fed to step 2


# ---------------------------------------------------------------------------------------------- padding, alignments


@pytest.mark.parametrize("cell", CELLS)
def test_annotations_are_zero_at_padded_source_positions(cell):
    """Padding invariance is test_properties.py's (every attention, cell and input feeding); the annotations of padded
    positions are zeros (what `pad_packed_sequence` fills in)."""
    model = build(cell=cell, reverse_source=cell == "lstm")
    mask = torch.tensor([[1] * 5 + [0] * 3])
    out = model(input_ids=tokens(1, 8), attention_mask=mask, decoder_input_ids=tokens(1, 4))
    annotations = out.encoder_last_hidden_state  # (1, 8, C)
    assert annotations[:, :5].abs().min() > 0 and annotations[:, 5:].abs().max() == 0


def test_the_collates_source_lengths_reach_the_kernel_without_a_copy_from_the_device():
    """With the collators' `packed_sequences` the encoder packs the sources with the lengths the collate found on the
    CPU: no `lengths.cpu()` (on a GPU a wait for every queued kernel), the same outputs bit for bit. (torch's
    `pad_packed_sequence` still copies the sort order of unsorted sequences to the host.)"""
    from torch.overrides import TorchFunctionMode

    from modeling.packing import PackedSequences

    class Copies(TorchFunctionMode):
        count = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Copies.count += func is torch.Tensor.cpu
            return func(*args, **(kwargs or {}))

    model = build(bidirectional_encoder=True)
    source, mask = sources()
    outputs, copies = [], []
    for given in ({}, {"packed_sequences": PackedSequences.for_batch(mask)}):
        Copies.count = 0
        with Copies():
            outputs.append(model(input_ids=source, attention_mask=mask, decoder_input_ids=tokens(3, 4), **given))
        copies.append(Copies.count)
    assert copies[1] == copies[0] - 1
    assert torch.equal(outputs[0].encoder_last_hidden_state, outputs[1].encoder_last_hidden_state)


@pytest.mark.parametrize("attention, input_feeding", DECODERS[1:])
def test_alignments_sum_to_one_over_real_source_positions_and_are_zero_on_padding(attention, input_feeding):
    model = build(attention=attention, input_feeding=input_feeding)
    input_ids, attention_mask = sources()
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=tokens(3, 5),
                output_attentions=True, output_hidden_states=True)
    (weights,) = out.cross_attentions  # one attention "layer" with one "head", as the Transformer's layout
    assert weights.shape == (3, 1, 5, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 1, 5))
    assert weights.masked_select((attention_mask == 0)[:, None, None, :]).abs().max() == 0
    assert (weights.masked_select((attention_mask == 1)[:, None, None, :]) > 0).all()
    assert [h.shape for h in out.decoder_hidden_states] == [(3, 5, 16), (3, 5, 32)]
    torch.testing.assert_close(model.lm_head(out.decoder_hidden_states[-1]), out.logits)
    assert [h.shape for h in out.encoder_hidden_states] == [(3, 7, 16), (3, 7, 32)]


def test_no_attention_returns_no_alignments_and_ignores_the_annotations():
    model = build(attention="none")
    input_ids, attention_mask = sources()
    target = tokens(3, 4)
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=target, output_attentions=True)
    assert out.cross_attentions is None
    encoded = model.model.encode(input_ids, attention_mask)
    scrambled = LineageRnnEncoderOutput(last_hidden_state=torch.randn_like(encoded.last_hidden_state),
                                        final_hidden=encoded.final_hidden)  # only the thought vector matters
    again = model(encoder_outputs=scrambled, attention_mask=attention_mask, decoder_input_ids=target)
    torch.testing.assert_close(again.logits, out.logits)


# ---------------------------------------------------------------------------------------------- cache and generate


@pytest.mark.parametrize("attention, input_feeding", DECODERS)
@pytest.mark.parametrize("cell", CELLS)
def test_the_cache_keeps_what_the_attention_and_input_feeding_need(attention, input_feeding, cell):
    """Cached decoding = a full pass is test_properties.py's; the cache keeps the projected annotations under an
    attention and the attentional state under input feeding, nothing else."""
    model = build(LineageRnnModel, attention=attention, input_feeding=input_feeding, cell=cell)
    input_ids, attention_mask = sources()
    cache = LineageRnnCache()
    model.decode(tokens(3, 2), model.encode(input_ids, attention_mask), attention_mask, cache=cache)
    assert cache.get_seq_length() == 2
    assert (cache.keys is None) == (attention == "none") and (cache.feed is not None) == input_feeding


def test_annotations_are_projected_once_per_generation():
    model = build(attention="bahdanau")
    input_ids, attention_mask = sources()
    calls = {"encoder": 0, "key_proj": 0, "query_proj": 0}
    for name, module in [("encoder", model.model.encoder), ("key_proj", model.model.decoder.attention.key_proj),
                         ("query_proj", model.model.decoder.attention.query_proj)]:
        module.register_forward_pre_hook(lambda *_, name=name: calls.__setitem__(name, calls[name] + 1))
    model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=6, do_sample=False)
    assert calls == {"encoder": 1, "key_proj": 1, "query_proj": 6}  # U h_i once; W s_{t-1} per step


def test_beam_scores_are_the_log_probabilities_of_the_returned_sequences():
    """Beam search reorders the recurrent state: each returned hypothesis must score what a fresh teacher-forced
    pass over it gives."""
    model = build(attention="luong-general", input_feeding=True, cell="lstm")
    input_ids, attention_mask = sources()
    out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=6, num_beams=4, length_penalty=0.0,
                         num_return_sequences=4, output_scores=True, return_dict_in_generate=True)
    sequences = out.sequences  # (B * 4, 1 + 6)
    logits = model(input_ids=input_ids.repeat_interleave(4, 0), attention_mask=attention_mask.repeat_interleave(4, 0),
                   decoder_input_ids=sequences[:, :-1]).logits
    log_probs = logits.log_softmax(-1).gather(-1, sequences[:, 1:, None]).squeeze(-1).sum(-1)
    torch.testing.assert_close(out.sequences_scores, log_probs, atol=1e-4, rtol=1e-4)


def test_generate_returns_one_alignment_per_step():
    model = build()
    input_ids, attention_mask = sources()
    out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=3, do_sample=False,
                         return_dict_in_generate=True, output_attentions=True)
    assert [step[0].shape for step in out.cross_attentions] == [(3, 1, 1, 7)] * 3  # one new token per step
    for step in out.cross_attentions:
        torch.testing.assert_close(step[0].sum(-1), torch.ones(3, 1, 1))


@pytest.mark.parametrize("assistance", [{"prompt_lookup_num_tokens": 2}, {"assistant_model": "itself"}])
def test_assisted_generation_is_refused_by_name_before_any_module_runs(assistance):
    """Assisted decoding rolls the cache back past rejected draft tokens; a recurrent state cannot be rolled back."""
    model = build()
    assistance = {key: model if value == "itself" else value for key, value in assistance.items()}
    calls = record_kernel_calls(model)
    input_ids, attention_mask = sources()
    with pytest.raises(ValueError, match="assisted generation is not supported with stateful models, such as "
                                         "LineageRnnForConditionalGeneration"):
        model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=3, **assistance)
    assert calls == []


def test_an_rnn_assistant_is_refused_by_name_before_any_module_runs():
    """A Transformer of the same vocabulary drafted for by an RNN: the assistant's state would be cut back too."""
    model = LineageTransformerForConditionalGeneration(preset("transformer-tiny"))
    assistant = build()
    model_calls, assistant_calls = record_kernel_calls(model), record_kernel_calls(assistant)
    input_ids, _ = sources((7,))
    with pytest.raises(ValueError, match="assisted generation is not supported with a stateful assistant model, such "
                                         "as LineageRnnForConditionalGeneration"):
        model.generate(input_ids, max_new_tokens=3, assistant_model=assistant)
    assert model_calls == [] and assistant_calls == []


def test_a_static_cache_request_keeps_the_recurrent_state_and_its_tokens():
    """The state has one size whatever the length: transformers ignores `cache_implementation` (with a warning, once
    a process), and the tokens and scores are those of the default generation (using.md "Generation" says so)."""
    model = build()
    input_ids, attention_mask = sources()
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=4, do_sample=False, num_beams=2,
                  return_dict_in_generate=True, output_scores=True)
    default = model.generate(input_ids, **kwargs)
    static = model.generate(input_ids, **kwargs, cache_implementation="static")
    assert torch.equal(static.sequences, default.sequences)
    torch.testing.assert_close(static.sequences_scores, default.sequences_scores, rtol=0, atol=0)


def test_cache_reorders_and_repeats_along_the_batch():
    model = build(LineageRnnModel, attention="luong-dot", input_feeding=True, cell="lstm")
    input_ids, attention_mask = sources()
    cache = LineageRnnCache()
    model.decode(tokens(3, 2), model.encode(input_ids, attention_mask), attention_mask, cache=cache)
    state, feed, keys = cache.state, cache.feed, cache.keys
    cache.reorder_cache(torch.tensor([2, 0, 0]))
    assert torch.equal(cache.state[1][:, 0], state[1][:, 2]) and torch.equal(cache.feed[1], feed[0])
    assert torch.equal(cache.keys[0], keys[2]) and cache.batch_size == 3 and cache.get_seq_length() == 2
    cache.batch_repeat_interleave(2)
    assert cache.state[0].shape == (2, 6, 32) and torch.equal(cache.feed[1], cache.feed[0])
    with pytest.raises(ValueError, match="cannot be cropped"):
        cache.crop(1)


# ---------------------------------------------------------------------------------------------- loss


def test_labels_are_shifted_right_and_the_loss_is_cross_entropy_smoothed_in_training_only():
    model = build(label_smoothing=0.1, hidden_dropout_prob=0.0).train()
    labels = torch.tensor([[5, 6, 7, EOS], [8, 9, -100, -100]])
    assert model.prepare_decoder_input_ids_from_labels(labels).tolist() == [[BOS, 5, 6, 7], [BOS, 8, 9, PAD]]
    input_ids, attention_mask = sources((5, 3))
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_logits=True)
    log_probs, kept = out.logits.log_softmax(-1), labels != -100
    target = 0.9 * torch.nn.functional.one_hot(labels.clamp(min=0), 99) + 0.1 / 99
    torch.testing.assert_close(out.loss, -(target * log_probs).sum(-1)[kept].mean())
    evaluated = model.eval()(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    nll = -log_probs.gather(-1, labels.clamp(min=0)[..., None])[..., 0][kept].mean()
    torch.testing.assert_close(evaluated.loss, nll)
    assert LineageRnnConfig().label_smoothing == 0.0  # plain cross-entropy unless a recipe asks


def test_tied_output_projection_is_the_target_embedding():
    model = build(embedding_size=32, tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight
    assert model.lm_head.weight is not model.model.encoder.embed_tokens.weight
    assert build().lm_head.weight is not build().model.decoder.embed_tokens.weight


# ---------------------------------------------------------------------------------------------- presets


@pytest.mark.parametrize("name, fields, parameters", [
    ("rnn-bahdanau-2014", {"cell": "gru", "bidirectional_encoder": True, "hidden_size": 1000, "embedding_size": 620,
                           "attention": "bahdanau", "maxout_size": 500}, 69_055_000),  # appendix A.2.2: l = 500
    ("rnn-luong-2015", {"cell": "lstm", "num_encoder_layers": 4, "hidden_size": 1000, "attention": "luong-general",
                        "input_feeding": True, "reverse_source": True}, 221_064_000),
])
def test_paper_presets(name, fields, parameters):
    config = preset(name)
    assert {k: getattr(config, k) for k in fields} == fields
    with torch.device("meta"):
        model = LineageRnnForConditionalGeneration(config)
    assert sum(p.numel() for p in model.parameters()) == parameters


# ---------------------------------------------------------------------------------------------- bad input


def test_odd_hidden_size_is_fine_with_a_one_way_encoder():
    assert build(hidden_size=33, bidirectional_encoder=False).model.encoder.rnn.hidden_size == 33


def _bad_input_cases():
    source, mask = sources()
    left_padded = mask.flip(1)
    return {
        "input_ids out of range": ({"input_ids": source + 99, "decoder_input_ids": tokens(3, 2)},
                                   r"`input_ids` must be in \[0, 99\)"),
        "decoder_input_ids out of range": ({"input_ids": source, "decoder_input_ids": tokens(3, 2) + 99},
                                           r"`decoder_input_ids` must be in \[0, 99\)"),
        "left padding": ({"input_ids": source, "attention_mask": left_padded, "decoder_input_ids": tokens(3, 2)},
                         r"`attention_mask` must be right-padded"),
        "empty source": ({"input_ids": source, "attention_mask": mask * 0, "decoder_input_ids": tokens(3, 2)},
                         r"at least one real token"),
        "mask shape": ({"input_ids": source, "attention_mask": mask[:, :5], "decoder_input_ids": tokens(3, 2)},
                       r"`attention_mask` must have the shape of `input_ids` \(3, 7\), got \(3, 5\)"),
        "decoder mask shape": ({"input_ids": source, "decoder_input_ids": tokens(3, 2),
                                "decoder_attention_mask": torch.ones(3, 4)}, r"`decoder_attention_mask` must have"),
        "decoder left padding": ({"input_ids": source, "decoder_input_ids": tokens(3, 2),
                                  "decoder_attention_mask": torch.tensor([[0, 1]] * 3)},
                                 r"`decoder_attention_mask` must be right-padded"),
        "labels shape": ({"input_ids": source, "decoder_input_ids": tokens(3, 4), "labels": tokens(3, 5)},
                         r"`labels` must have shape \(3, 4\) to match the logits, got \(3, 5\)"),
        "neither decoder_input_ids nor labels": ({"input_ids": source}, r"Give `decoder_input_ids`.*or `labels`"),
        "tuple encoder outputs": ({"encoder_outputs": (torch.zeros(3, 7, 32),), "decoder_input_ids": tokens(3, 2)},
                                  r"`encoder_outputs` must be what `model.get_encoder\(\)` returns"),
        "encoder outputs batch": ({"encoder_outputs": {"last_hidden_state": torch.zeros(2, 7, 32)},
                                   "decoder_input_ids": tokens(3, 2)}, r"batch size 2 but `decoder_input_ids` have 3"),
        "key/value cache": ({"input_ids": source, "decoder_input_ids": tokens(3, 2),
                             CACHE_NAME: transformers.DynamicCache()},
                            rf"`{CACHE_NAME}` must be a `LineageRnnCache`"),
    }


@pytest.mark.parametrize("case", list(_bad_input_cases()))
def test_bad_input_is_rejected_before_any_kernel_runs(case):
    inputs, message = _bad_input_cases()[case]
    model = build()
    calls = record_kernel_calls(model)
    with pytest.raises(ValueError, match=message):
        model(**inputs)
    assert calls == [], calls


def test_encoder_outputs_without_a_final_state_need_bridge_none():
    model = build()
    outputs = {"last_hidden_state": torch.zeros(3, 7, 32)}
    with pytest.raises(ValueError, match="lack the encoder's final state that `bridge='linear'` needs"):
        model(encoder_outputs=outputs, decoder_input_ids=tokens(3, 2))
    assert build(bridge="none")(encoder_outputs=outputs, decoder_input_ids=tokens(3, 2)).logits.shape == (3, 2, 99)


def test_decoder_start_token_id_missing_in_training():
    model = build(decoder_start_token_id=None)
    with pytest.raises(ValueError, match="`decoder_start_token_id`"):
        model(input_ids=tokens(2, 4), labels=tokens(2, 3))


def test_conversion_refuses_rnn_models_with_the_supported_classes():
    from modeling.conversion import to_transformers

    with pytest.raises(TypeError, match=r"No conversion for LineageRnnForConditionalGeneration; supported classes: "):
        to_transformers(build())
