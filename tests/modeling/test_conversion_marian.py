"""Conversion between transformers' `MarianModel` / `MarianMTModel` and the Lineage Transformer: a missing or untied
output layer, configs without an equivalent refused. The tiny references and their batch are here; the same outputs
(fp32, within 1e-5) in both directions, with source padding, under eager and sdpa, and identical greedy and beam
search are test_properties.py's parity, over every pair."""

import pytest
import torch
import transformers
from conftest import preset

from modeling import LineageTransformerForConditionalGeneration
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
