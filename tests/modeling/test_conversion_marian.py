"""Conversion between transformers' `MarianModel` / `MarianMTModel` and the Lineage Transformer: the same logits
(fp32, within 1e-5) in both directions, with source padding, under eager and sdpa, and identical beam search."""

import pytest
import torch
import transformers
from conftest import preset

from modeling import LineageTransformerForConditionalGeneration, LineageTransformerModel
from modeling.conversion import from_transformers, to_transformers

PAD = 98  # opus-mt style: <pad> is the last id and starts decoding, </s> is 0


def marian_config(attn: str = "sdpa", **overrides) -> transformers.MarianConfig:
    fields = dict(
        vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64,
        activation_function="swish", scale_embedding=True, pad_token_id=PAD, decoder_start_token_id=PAD,
        eos_token_id=0, forced_eos_token_id=0, attn_implementation=attn,
    )
    return transformers.MarianConfig(**{**fields, **overrides})


def marian(model_class=transformers.MarianMTModel, attn: str = "sdpa", **overrides):
    model = model_class(marian_config(attn, **overrides)).eval()
    if hasattr(model, "final_logits_bias"):
        model.final_logits_bias.normal_()  # zero at init; a random bias proves it is carried over
    return model


def batch() -> dict:
    input_ids = torch.randint(1, 98, (3, 9))
    attention_mask = torch.ones_like(input_ids)
    for row, length in ((1, 6), (2, 3)):
        input_ids[row, length:], attention_mask[row, length:] = PAD, 0
    return {"input_ids": input_ids, "attention_mask": attention_mask, "decoder_input_ids": torch.randint(1, 98, (3, 7))}


def outputs(model, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        out = model(**inputs)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("reference_class, lineage_class", [
    (transformers.MarianMTModel, LineageTransformerForConditionalGeneration),
    (transformers.MarianModel, LineageTransformerModel),
])
def test_marian_to_lineage_and_back_gives_the_same_outputs(attn, reference_class, lineage_class):
    reference = marian(reference_class, attn)
    lineage = from_transformers(reference)
    assert type(lineage) is lineage_class and lineage.config._attn_implementation == attn
    assert lineage.config.sinusoidal_layout == "split" and lineage.config.hidden_act == "silu"
    inputs = batch()
    expected = outputs(reference, inputs)
    error = (outputs(lineage, inputs) - expected).abs().max().item()
    print(f"\nmarian -> lineage {reference_class.__name__} {attn}: max abs error {error:.2e}")
    assert error < 1e-5
    back = to_transformers(lineage)
    assert type(back) is reference_class
    torch.testing.assert_close(outputs(back, inputs), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_lineage_to_marian_gives_the_same_logits(attn):
    config = preset("transformer-tiny", sinusoidal_layout="split", final_logits_bias=True, hidden_act="gelu",
                    attn_implementation=attn)
    lineage = LineageTransformerForConditionalGeneration(config).eval()
    lineage.final_logits_bias.normal_()
    reference = to_transformers(lineage)
    assert type(reference) is transformers.MarianMTModel and reference.config.activation_function == "gelu"
    inputs = batch()
    inputs["input_ids"] = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, config.pad_token_id)
    error = (outputs(reference, inputs) - outputs(lineage, inputs)).abs().max().item()
    print(f"\nlineage -> marian {attn}: max abs error {error:.2e}")
    assert error < 1e-5
    again = from_transformers(reference)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in lineage.state_dict().items())


def test_lineage_without_logits_bias_converts_with_a_zero_bias():
    lineage = LineageTransformerForConditionalGeneration(preset("transformer-tiny", sinusoidal_layout="split")).eval()
    reference = to_transformers(lineage)
    assert reference.final_logits_bias.abs().max() == 0
    inputs = batch()
    torch.testing.assert_close(outputs(reference, inputs), outputs(lineage, inputs), atol=1e-5, rtol=0)


def test_untied_output_projection_converts_both_ways():
    lineage = LineageTransformerForConditionalGeneration(
        preset("transformer-tiny", sinusoidal_layout="split", tie_word_embeddings=False)
    ).eval()
    reference = to_transformers(lineage)
    inputs = batch()
    torch.testing.assert_close(outputs(reference, inputs), outputs(lineage, inputs), atol=1e-5, rtol=0)
    again = from_transformers(reference)
    assert again.lm_head.weight is not again.model.encoder.embed_tokens.weight
    torch.testing.assert_close(outputs(again, inputs), outputs(lineage, inputs), atol=0, rtol=0)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generation_is_identical(num_beams, exact_linear):
    reference = marian()
    lineage = from_transformers(reference)
    assert lineage.generation_config.forced_eos_token_id == 0  # the reference's decoding settings travel along
    inputs = batch()
    del inputs["decoder_input_ids"]
    kwargs = dict(num_beams=num_beams, length_penalty=0.6, max_new_tokens=12, min_new_tokens=4)
    expected = reference.generate(**inputs, **kwargs)
    assert expected.shape[1] > 5
    assert torch.equal(lineage.generate(**inputs, **kwargs), expected)
    assert torch.equal(to_transformers(lineage).generate(**inputs, **kwargs), expected)


@pytest.mark.parametrize("field, value, fragment", [
    ("decoder_layers", 3, "`decoder_layers`=3 differs from `encoder_layers`=2"),
    ("decoder_ffn_dim", 40, "`decoder_ffn_dim`=40 differs from `encoder_ffn_dim`=37"),
    ("activation_dropout", 0.1, "`activation_dropout`=0.1 is not 0"),
    ("share_encoder_decoder_embeddings", False, "`share_encoder_decoder_embeddings` is False"),
    ("activation_function", "tanh", "`activation_function`='tanh' is not one of"),
])
def test_marian_configs_without_an_equivalent_are_rejected(field, value, fragment):
    with pytest.raises(ValueError) as error:
        from_transformers(marian(**{field: value}))
    assert fragment in str(error.value)


def test_differing_encoder_and_decoder_embeddings_are_rejected():
    reference = marian(tie_word_embeddings=False)  # transformers 5 then unties the three embeddings
    reference.model.decoder.embed_tokens.weight.data.normal_()
    with pytest.raises(ValueError, match="encoder and decoder embeddings differ"):
        from_transformers(reference)


@pytest.mark.parametrize("field, value", [
    ("sinusoidal_layout", "interleaved"),
    ("norm_position", "pre"),
    ("position_embedding_type", "learned"),
    ("layer_norm_eps", 1e-6),
])
def test_lineage_configs_without_a_marian_equivalent_are_rejected(field, value):
    overrides = {"sinusoidal_layout": "split", field: value}
    lineage = LineageTransformerForConditionalGeneration(preset("transformer-tiny", **overrides))
    with pytest.raises(ValueError, match=f"`{field}`={value!r}"):
        to_transformers(lineage)
