"""GPT conversion: transformers' OpenAIGPT* (post-norm) and GPT2* (pre-norm): where the weights land, models without
an equivalent refused, metadata token ids kept. The tiny references and their padded batches are here; the same
outputs both ways (within 1e-5 in fp32, with padding, eager and sdpa) and the same `generate()` tokens are
test_properties.py's parity, over every pair."""

import pytest
import torch
import transformers
from conftest import preset

from modeling import (
    LineageGptForCausalLM,
    LineageGptForMultipleChoice,
)
from modeling.conversion import from_transformers, to_transformers

ATOL = 1e-5
SIZE = dict(vocab_size=99, n_positions=64, n_embd=32, n_layer=2, n_head=4)
REFERENCES = {
    "OpenAIGPT": (transformers.OpenAIGPTConfig, dict(SIZE, afn="gelu")),
    "GPT2": (transformers.GPT2Config, dict(SIZE, n_inner=37, bos_token_id=4, eos_token_id=4)),
}


def perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """Move every weight off its initial value (LayerNorms included), so a misplaced tensor shows in the outputs."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return model.eval()


def reference_model(family: str, head: str, **overrides) -> torch.nn.Module:
    config_class, fields = REFERENCES[family]
    config = config_class(**{**fields, "pad_token_id": 0, "num_labels": 3, **overrides})
    return perturbed(getattr(transformers, family + head)(config))


def padded_batch(side: str) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = (10, 6, 8)
    ids, mask = torch.zeros(3, 10, dtype=torch.long), torch.zeros(3, 10, dtype=torch.long)
    for i, n in enumerate(lengths):
        span = slice(10 - n, 10) if side == "left" else slice(0, n)
        ids[i, span], mask[i, span] = torch.randint(5, 99, (n,)), 1
    return ids, mask


def main_output(model, ids, mask, position_ids=None) -> torch.Tensor:
    with torch.no_grad():
        outputs = model(input_ids=ids, attention_mask=mask, position_ids=position_ids)
    return outputs.last_hidden_state if hasattr(outputs, "last_hidden_state") else outputs.logits


def test_weights_land_where_the_reference_keeps_them():
    reference = reference_model("GPT2", "LMHeadModel")
    lineage = from_transformers(reference)
    attn = reference.transformer.h[1].attn
    q, k, v = attn.c_attn.weight.t().chunk(3)  # Conv1D (in, 3C) -> Linear (3C, in) -> q, k, v
    sublayer = lineage.transformer.layers[1].self_attn.sublayer
    assert torch.equal(sublayer.q_proj.weight, q) and torch.equal(sublayer.k_proj.weight, k)
    assert torch.equal(sublayer.v_proj.weight, v) and torch.equal(sublayer.o_proj.weight, attn.c_proj.weight.t())
    assert torch.equal(lineage.transformer.final_norm.weight, reference.transformer.ln_f.weight)
    assert lineage.lm_head.weight is lineage.transformer.embed_tokens.weight


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: LineageGptForCausalLM(preset("gpt-tiny", intermediate_size=128, gated_ffn=True)), "gated_ffn"),
        (lambda: LineageGptForCausalLM(preset("gpt-tiny", intermediate_size=128, hidden_act="gelu")), "hidden_act"),
        (lambda: LineageGptForCausalLM(preset("gpt-tiny")), "intermediate_size"),
    ],
)
def test_lineage_without_a_reference_equivalent_is_refused(build, match):
    with pytest.raises(ValueError, match=match):
        to_transformers(build())


def test_reference_without_a_lineage_equivalent_is_refused():
    with pytest.raises(ValueError, match="embd_pdrop"):
        from_transformers(reference_model("GPT2", "Model", embd_pdrop=0.2))
    with pytest.raises(ValueError, match="scale_attn_by_inverse_layer_idx"):
        from_transformers(reference_model("GPT2", "Model", scale_attn_by_inverse_layer_idx=True))
    with pytest.raises(TypeError, match="No conversion for LineageGptForMultipleChoice"):
        to_transformers(LineageGptForMultipleChoice(preset("gpt-tiny")))


def test_any_model_the_reference_loads_converts_keeping_metadata_token_ids(tmp_path):
    """GPT2Config(vocab_size=99) keeps GPT-2's bos/eos id 50256: transformers builds and runs the model, and so does
    the conversion, with a warning; the ids index no weight, so the outputs, a save/load and the way back agree."""
    config = transformers.GPT2Config(**SIZE, n_inner=37)
    assert (config.bos_token_id, config.eos_token_id) == (50256, 50256)
    reference = perturbed(transformers.GPT2LMHeadModel(config))
    with pytest.warns(UserWarning, match=r"must be None or in \[0, 99\).*Kept as stored") as warned:
        lineage = from_transformers(reference)
    assert {str(w.message)[:14] for w in warned} == {"`bos_token_id`", "`eos_token_id`"}
    assert (lineage.config.bos_token_id, lineage.config.eos_token_id) == (50256, 50256)
    ids, mask = torch.randint(5, 99, (3, 10)), torch.ones(3, 10, dtype=torch.long)
    expected = main_output(reference, ids, mask)
    torch.testing.assert_close(main_output(lineage, ids, mask), expected, rtol=0, atol=ATOL)
    lineage.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="Kept as stored"):
        loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(main_output(loaded, ids, mask), expected, rtol=0, atol=ATOL)
    back = to_transformers(lineage)
    assert back.config.eos_token_id == 50256
    torch.testing.assert_close(main_output(back, ids, mask), expected, rtol=0, atol=ATOL)
    generated = lineage.generate(ids[:1, :4], max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert torch.equal(generated, reference.generate(ids[:1, :4], max_new_tokens=3, do_sample=False, pad_token_id=0))


def test_a_new_config_still_refuses_token_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match=r"`eos_token_id` must be None or in \[0, 99\)"):
        preset("gpt-tiny", eos_token_id=50256)
    stored = transformers.AutoConfig.for_model("lineage-gpt").to_dict() | {"vocab_size": 99, "eos_token_id": 50256}
    with pytest.warns(UserWarning, match="`eos_token_id`"):
        assert transformers.AutoConfig.for_model("lineage-gpt").from_dict(stored).eos_token_id == 50256
