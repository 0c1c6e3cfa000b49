"""The encoder-decoder Transformer: shapes and losses, the encoder-decoder cache and `generate()` (the encoder and
cross-attention projections run once, its attentions and hidden states, inductor compilation), save/load with the
sinusoids recomputed, Seq2SeqTrainer, presets against the paper's table 3, and bad input. Padding, causality, cached
decoding, eager == sdpa, the clean-process load, gradient checkpointing, the output flags, static caches, fullgraph
compilation and seeded sampling are test_properties.py's, bad config values test_contract.py's, over every head."""

import json
import math

import pytest
import torch
import transformers
from conftest import PRESETS, preset
from transformers.modeling_outputs import BaseModelOutput

from modeling import (
    LineageTransformerConfig,
    LineageTransformerForConditionalGeneration,
    LineageTransformerModel,
)
from modeling.arguments import CACHE_NAME
from train.run.recipes import bundled, load_recipe

PAD, BOS, EOS = 0, 1, 2  # transformer-tiny: <pad> <s> </s> <unk>, then ordinary tokens
VARIANTS = [  # (norm_position, position_embedding_type, sinusoidal_layout)
    ("post", "sinusoidal", "interleaved"),
    ("pre", "learned", "interleaved"),
    ("post", "sinusoidal", "split"),
]


def build(model_class=LineageTransformerForConditionalGeneration, attn="sdpa", **overrides):
    """A tiny model in eval mode; `eos_token_id=None` so generation never stops early."""
    config = preset("transformer-tiny", **{"eos_token_id": None, **overrides})
    config._attn_implementation = attn
    return model_class(config).eval()


def tokens(*shape: int) -> torch.Tensor:
    return torch.randint(4, 99, shape)  # never a special token


def sources(lengths=(7, 4, 6)) -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded batch of sources of different lengths: (input_ids, attention_mask)."""
    ids, mask = torch.full((len(lengths), max(lengths)), PAD), torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, length in enumerate(lengths):
        ids[i, :length], mask[i, :length] = tokens(length), 1
    return ids, mask


def record_kernel_calls(model: torch.nn.Module) -> list:
    """Record every call of a leaf module (embedding, linear, norm, ...): a check that must fail before any kernel
    runs leaves the list empty."""
    calls = []
    for module in model.modules():
        if next(module.children(), None) is None:
            module.register_forward_pre_hook(lambda m, args, calls=calls: calls.append(type(m).__name__))
    return calls


# ---------------------------------------------------------------------------------------------- shapes, loss


@pytest.mark.parametrize("norm_position, positions, layout", VARIANTS)
def test_shapes_loss_and_backward(norm_position, positions, layout):
    model = build(norm_position=norm_position, position_embedding_type=positions, sinusoidal_layout=layout).train()
    input_ids, attention_mask = sources()
    labels = tokens(3, 5)
    labels[1, 3:] = -100
    assert model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).logits is None  # test_lm_loss.py
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_logits=True)
    assert out.logits.shape == (3, 5, 99)
    assert out.encoder_last_hidden_state.shape == (3, 7, 32)
    assert out.past_key_values is None  # no cache when training on labels
    assert torch.isfinite(out.loss)
    out.loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []
    base = build(LineageTransformerModel, norm_position=norm_position, position_embedding_type=positions)
    hidden = base(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=tokens(3, 5))
    assert hidden.last_hidden_state.shape == (3, 5, 32)


def test_final_norm_only_under_pre_norm():
    assert build(norm_position="post").model.encoder.final_norm is None
    pre = build(norm_position="pre").model
    assert pre.encoder.final_norm is not None and pre.decoder.final_norm is not None


def test_three_way_weight_sharing_and_embedding_scale():
    model = build()
    shared = model.model.encoder.embed_tokens.weight
    assert model.lm_head.weight is shared and model.get_input_embeddings().weight is shared
    assert model.model.encoder.embed_scale == model.model.decoder.embed_scale == math.sqrt(32)
    untied = build(tie_word_embeddings=False)
    assert untied.lm_head.weight is not untied.model.encoder.embed_tokens.weight
    # the scaled embeddings start with unit variance, like the sinusoids they are added to
    assert 0.8 < (build(vocab_size=4000).model.encoder.embed_tokens.weight * math.sqrt(32)).std() < 1.2


def test_sinusoids_follow_the_paper_formula():
    table = build().model.encoder.embed_positions.weight  # (P, C)
    position, i = 5, 3
    angle = position / 10000 ** (2 * i / 32)
    assert table[position, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert table[position, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    split = build(sinusoidal_layout="split").model.encoder.embed_positions.weight
    assert split[position, i].item() == pytest.approx(math.sin(angle), abs=1e-6)
    assert split[position, 16 + i].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_labels_are_shifted_right_from_the_decoder_start_token():
    model = build()
    labels = torch.tensor([[5, 6, 7, EOS], [8, 9, -100, -100]])
    shifted = model.prepare_decoder_input_ids_from_labels(labels)
    assert shifted.tolist() == [[BOS, 5, 6, 7], [BOS, 8, 9, PAD]]
    input_ids, attention_mask = sources((5, 3))
    implicit = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    explicit = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, decoder_input_ids=shifted)
    torch.testing.assert_close(implicit.logits, explicit.logits, atol=0, rtol=0)
    torch.testing.assert_close(implicit.loss, explicit.loss, atol=0, rtol=0)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_matches_a_hand_computation_in_training_and_is_the_nll_in_eval(smoothing):
    model = build(label_smoothing=smoothing, hidden_dropout_prob=0.0).train()
    input_ids, attention_mask = sources((5, 3))
    labels = tokens(2, 4)
    labels[1, 2:] = -100
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, return_logits=True)
    log_probs = out.logits.log_softmax(-1)
    kept = labels != -100
    target = (1 - smoothing) * torch.nn.functional.one_hot(labels.clamp(min=0), 99) + smoothing / 99  # (B, T, V)
    per_token = -(target * log_probs).sum(-1)  # (B, T)
    torch.testing.assert_close(out.loss, per_token[kept].mean(), atol=1e-5, rtol=1e-5)
    summed = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=12)
    torch.testing.assert_close(summed.loss, per_token[kept].sum() / 12, atol=1e-5, rtol=1e-5)
    nll = -log_probs.gather(-1, labels.clamp(min=0)[..., None])[..., 0][kept].mean()
    evaluated = model.eval()(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(evaluated.loss, nll, atol=1e-5, rtol=1e-5)


def test_default_loss_is_the_nll_and_so_is_the_trainer_eval_loss(tmp_path):
    model = build(hidden_dropout_prob=0.0)
    assert LineageTransformerConfig().label_smoothing == model.config.label_smoothing == 0.0
    input_ids, attention_mask = sources((5, 3))
    labels = tokens(2, 4)
    labels[1, 2:] = -100
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    nll = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 99), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, nll, atol=1e-6, rtol=1e-6)
    rows = [{"input_ids": i, "attention_mask": m, "labels": y} for i, m, y in zip(input_ids, attention_mask, labels)]
    args = transformers.Seq2SeqTrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=2,
                                                 report_to=[], use_cpu=True)
    metrics = transformers.Seq2SeqTrainer(model=model, args=args, eval_dataset=rows).evaluate()
    assert metrics["eval_loss"] == pytest.approx(nll.item(), rel=1e-5)
    assert math.exp(metrics["eval_loss"]) == pytest.approx(nll.exp().item(), rel=1e-5)  # so is the perplexity


# ---------------------------------------------------------------------------------------------- attentions


def test_generate_returns_encoder_and_decoder_attentions_and_hidden_states():
    model = build(attn="eager")
    input_ids, attention_mask = sources()
    out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=3, do_sample=False,
                         return_dict_in_generate=True, output_attentions=True, output_hidden_states=True)
    encoded = model.model.encode(input_ids, attention_mask, output_attentions=True, output_hidden_states=True)
    assert len(out.encoder_hidden_states) == 3 and len(out.encoder_attentions) == 2
    for expected, actual in zip(encoded.hidden_states + encoded.attentions,
                                out.encoder_hidden_states + out.encoder_attentions, strict=True):
        torch.testing.assert_close(actual, expected)
    assert len(out.decoder_attentions) == len(out.cross_attentions) == len(out.decoder_hidden_states) == 3  # steps
    assert all(len(step) == 2 for step in out.decoder_attentions + out.cross_attentions)
    assert all(len(step) == 3 for step in out.decoder_hidden_states)
    assert [step[0].shape for step in out.cross_attentions] == [(3, 4, 1, 7)] * 3  # one new token per step


# ---------------------------------------------------------------------------------------------- cache and generate


def test_cross_attention_keys_and_values_are_projected_once_per_generation():
    model = build()
    input_ids, attention_mask = sources()
    calls = {"encoder": 0, "cross_k": 0}
    model.model.encoder.register_forward_pre_hook(lambda *_: calls.__setitem__("encoder", calls["encoder"] + 1))
    for layer in model.model.decoder.layers:
        layer.cross_attn.sublayer.k_proj.register_forward_pre_hook(
            lambda *_: calls.__setitem__("cross_k", calls["cross_k"] + 1))
    model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=6, do_sample=False)
    assert calls == {"encoder": 1, "cross_k": 2}  # one per decoder layer, not per step


@pytest.mark.slow
def test_static_cache_decoding_compiles_with_inductor():
    model = build()
    input_ids, attention_mask = sources((7, 4))
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=5, do_sample=False, cache_implementation="static")
    config = transformers.CompileConfig(fullgraph=True, mode="default", dynamic=False)
    config._compile_all_devices = True
    assert torch.equal(model.generate(input_ids, compile_config=config, **kwargs), model.generate(input_ids, **kwargs))


def test_every_position_of_the_table_is_accepted_and_no_more():
    """Positions are 0..S-1 in the encoder and continue from the cache in the decoder (as Marian's: no
    `position_ids` argument); sequences that use exactly the 64 positions of the table run, one more is refused."""
    model = build()
    source, target = tokens(1, 64), tokens(1, 64)
    full = model(input_ids=source, decoder_input_ids=target).logits
    cache = model(input_ids=source, decoder_input_ids=target[:, :63]).past_key_values
    step = model(input_ids=source, decoder_input_ids=target[:, 63:], cache=cache)
    torch.testing.assert_close(step.logits[:, -1], full[:, -1], rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match=rf"`{CACHE_NAME} \+ decoder_input_ids` has 65 positions"):
        model(input_ids=source, decoder_input_ids=target[:, :1], cache=step.past_key_values)


# ---------------------------------------------------------------------------------------------- save / load


def test_save_load_round_trip_generates_identical_tokens(tmp_path):
    model = build(final_logits_bias=True, sinusoidal_layout="split")
    with torch.no_grad():
        model.final_logits_bias.normal_()
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is LineageTransformerForConditionalGeneration
    assert loaded.lm_head.weight is loaded.model.encoder.embed_tokens.weight
    saved, restored = model.state_dict(), loaded.state_dict()
    assert saved.keys() == restored.keys() and all(torch.equal(saved[k], restored[k]) for k in saved)
    # the sinusoid tables are not saved but recomputed on load
    assert torch.equal(loaded.model.decoder.embed_positions.weight, model.model.decoder.embed_positions.weight)
    input_ids, attention_mask = sources()
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=8, num_beams=4, length_penalty=0.6)
    assert torch.equal(loaded.generate(input_ids, **kwargs), model.generate(input_ids, **kwargs))
    base = transformers.AutoModel.from_pretrained(tmp_path)
    assert type(base) is LineageTransformerModel


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_loads_in_half_precision_and_generates(tmp_path, dtype):
    model = build()
    model.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path, dtype=dtype).eval()
    # the sinusoids are rebuilt on load, in the dtype asked for, so every matmul sees one dtype
    assert {p.dtype for p in loaded.parameters()} == {loaded.model.encoder.embed_positions.weight.dtype} == {dtype}
    input_ids, attention_mask = sources()
    logits = loaded(input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits
    assert logits.dtype == dtype and torch.isfinite(logits).all()
    full = model(input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids).logits
    torch.testing.assert_close(logits.float(), full, atol=0.1, rtol=0.05)
    assert loaded.generate(input_ids, attention_mask=attention_mask, max_new_tokens=4, num_beams=2).shape[0] == 3


def test_resize_token_embeddings_keeps_tie_and_logits_bias():
    model = build(final_logits_bias=True)
    model.resize_token_embeddings(120)
    assert model.final_logits_bias.shape == (1, 120) and model.lm_head.weight is model.get_input_embeddings().weight
    out = model(input_ids=tokens(2, 5), decoder_input_ids=torch.full((2, 3), 110))
    assert out.logits.shape == (2, 3, 120)


# ---------------------------------------------------------------------------------------------- training


def _digit_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": PAD, "<s>": BOS, "</s>": EOS, "<unk>": 3, **{str(d): 4 + d for d in range(10)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def test_seq2seq_trainer_step_with_collator_and_generation(tmp_path):
    tokenizer = _digit_tokenizer()
    model = build(eos_token_id=EOS)
    rows = ["3141", "27", "18281", "828459"]
    dataset = [{"input_ids": tokenizer(r)["input_ids"] + [EOS], "labels": tokenizer(r[::-1])["input_ids"] + [EOS]}
               for r in rows]
    collator = transformers.DataCollatorForSeq2Seq(tokenizer, model=model)
    batch = collator(dataset[:2])
    assert batch["labels"][1, -1] == -100 and batch["decoder_input_ids"][:, 0].tolist() == [BOS, BOS]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = transformers.Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, per_device_eval_batch_size=2, max_steps=2,
        learning_rate=1e-3, report_to=[], save_strategy="no", use_cpu=True, predict_with_generate=True,
        generation_max_length=8,
    )
    trainer = transformers.Seq2SeqTrainer(model=model, args=args, train_dataset=dataset, eval_dataset=dataset,
                                          data_collator=collator)
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    assert any(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())
    prediction = trainer.predict(dataset)
    assert prediction.predictions.shape[0] == 4 and math.isfinite(prediction.metrics["test_loss"])


# ---------------------------------------------------------------------------------------------- presets


@pytest.mark.parametrize("name, paper, dropout", [("transformer-base", 65e6, 0.1), ("transformer-big", 213e6, 0.3)])
def test_preset_parameter_counts_match_the_paper(name, paper, dropout):
    config = preset(name)
    assert config.hidden_dropout_prob == dropout and config.vocab_size == 37000 and config.num_hidden_layers == 6
    with torch.device("meta"):
        model = LineageTransformerForConditionalGeneration(config)
    count = sum(p.numel() for p in model.parameters())  # the three-way shared embedding counts once
    assert abs(count - paper) / paper < 0.05, count


def test_defaults_are_the_paper_base_model():
    config = LineageTransformerConfig()
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads, config.intermediate_size) == (
        6, 512, 8, 2048)
    assert (config.hidden_act, config.norm_position, config.position_embedding_type, config.sinusoidal_layout) == (
        "relu", "post", "sinusoidal", "interleaved")
    assert config.scale_embedding and config.tie_word_embeddings and config.is_encoder_decoder
    assert config.hidden_dropout_prob == 0.1 and not config.final_logits_bias
    assert config.label_smoothing == 0.0  # the loss is the NLL; the paper's 0.1 is in the translation recipes


def test_presets_describe_architectures_and_the_translation_recipes_smooth_labels():
    for path in PRESETS.glob("transformer-*.json"):
        assert "label_smoothing" not in json.loads(path.read_text()), path.name
    translation = [name for name in bundled("recipes") if "translation" in name]
    assert len(translation) >= 4
    for name in translation:
        assert load_recipe(name).label_smoothing == 0.1, name


# ---------------------------------------------------------------------------------------------- bad input


def _bad_input_cases():
    source, mask = sources()
    wrong_batch = BaseModelOutput(last_hidden_state=torch.zeros(2, 7, 32))
    return {
        "input_ids negative": ({"input_ids": source.masked_fill(source == PAD, -1), "decoder_input_ids": tokens(3, 2)},
                               r"`input_ids` must be in \[0, 99\) \(vocab_size=99\), got -1"),
        "input_ids too large": ({"input_ids": source + 99, "decoder_input_ids": tokens(3, 2)},
                                r"`input_ids` must be in \[0, 99\)"),
        "decoder_input_ids out of range": ({"input_ids": source, "decoder_input_ids": tokens(3, 2) + 99},
                                           r"`decoder_input_ids` must be in \[0, 99\)"),
        "source too long": ({"input_ids": tokens(1, 65), "decoder_input_ids": tokens(1, 2)},
                            r"`input_ids` has 65 positions but `max_position_embeddings` is 64"),
        "target too long": ({"input_ids": source, "decoder_input_ids": tokens(3, 65)},
                            r"`decoder_input_ids` has 65 positions but `max_position_embeddings` is 64"),
        "mask shape": ({"input_ids": source, "attention_mask": mask[:, :5], "decoder_input_ids": tokens(3, 2)},
                       r"`attention_mask` must have the shape of `input_ids` \(3, 7\), got \(3, 5\)"),
        "decoder mask shape": ({"input_ids": source, "decoder_input_ids": tokens(3, 2),
                                "decoder_attention_mask": torch.ones(3, 4)}, r"`decoder_attention_mask` must have"),
        "labels shape": ({"input_ids": source, "decoder_input_ids": tokens(3, 4), "labels": tokens(3, 5)},
                         r"`labels` must have shape \(3, 4\) to match the logits, got \(3, 5\)"),
        "neither decoder_input_ids nor labels": ({"input_ids": source, "attention_mask": mask},
                                                 r"Give `decoder_input_ids`.*or `labels`"),
        "encoder outputs batch": ({"encoder_outputs": wrong_batch, "decoder_input_ids": tokens(3, 2)},
                                  r"`encoder_outputs` have batch size 2 but `decoder_input_ids` have 3"),
        "decoder-only cache": ({"input_ids": source, "decoder_input_ids": tokens(3, 2),
                                CACHE_NAME: transformers.DynamicCache()},
                               rf"`{CACHE_NAME}` must be an `EncoderDecoderCache`"),
    }


@pytest.mark.parametrize("case", list(_bad_input_cases()))
def test_bad_input_is_rejected_before_any_kernel_runs(case):
    inputs, message = _bad_input_cases()[case]
    model = build()
    calls = record_kernel_calls(model)
    with pytest.raises(ValueError, match=message):
        model(**inputs)
    assert calls == [], calls


def test_decoder_start_token_id_missing_in_training():
    model = build(decoder_start_token_id=None)
    calls = record_kernel_calls(model)
    with pytest.raises(ValueError, match="`decoder_start_token_id`"):
        model(input_ids=tokens(2, 4), labels=tokens(2, 3))
    assert calls == []


def test_decoder_start_token_id_missing_at_generation():
    model = build(decoder_start_token_id=None, bos_token_id=None)
    calls = record_kernel_calls(model)
    with pytest.raises(ValueError, match="`decoder_start_token_id`"):
        model.generate(tokens(2, 4), max_new_tokens=3)
    assert calls == []
