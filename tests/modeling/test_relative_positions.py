"""Relative position representations (Shaw et al. 2018) in the shared attention, for every family: the paper's
equations against a naive reference, shift invariance, clipping, the kernels each setting runs, cached decoding and
generation (left padding, beam search, static cache), gradients to both tables, a training step per family and
setting, conversion refused, save/load (also in a clean process), and bad configs."""

import json
import math

import pytest
import torch
from conftest import preset, run_clean_process
from transformers import AutoConfig

from modeling import (
    LineageBertForMaskedLM,
    LineageGptForCausalLM,
    LineageTransformerForConditionalGeneration,
)
from modeling.conversion import to_transformers
from modeling.layers import (
    LineageAttention,
    eager_attention_forward,
    sdpa_relative_keys_forward,
)
from modeling.relative_positions import relative_position_index

K = 2  # max_relative_position: small, so the tiny sequences below reach past it
KINDS = ("relative", "relative-keys")
FAMILIES = {"bert-tiny": LineageBertForMaskedLM, "gpt-tiny": LineageGptForCausalLM,
            "transformer-tiny": LineageTransformerForConditionalGeneration}
SETTINGS = {  # name -> position overrides; the Transformer's absolute default is its own ("sinusoidal")
    "absolute": {},
    "relative": {"position_embedding_type": "relative", "max_relative_position": K},
    "relative-keys": {"position_embedding_type": "relative-keys", "max_relative_position": K},
    "both": {"position_embedding_type": "relative", "max_relative_position": K, "absolute_and_relative": True},
}


def build(name: str, setting: str = "relative", attn: str = "sdpa", **overrides):
    """A tiny model of family `name` in eval mode, without dropout; `eos_token_id=None` so greedy runs never stop."""
    fields = {**SETTINGS[setting], "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, **overrides}
    if name != "bert-tiny":
        fields["eos_token_id"] = None
    config = preset(name, **fields)
    config._attn_implementation = attn
    return FAMILIES[name](config).eval()


def tokens(*shape: int) -> torch.Tensor:
    return torch.randint(5, 99, shape)  # never a special token


def left_padded(length: int = 9, pads: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows, the second with `pads` padding tokens on the left: (input_ids, attention_mask)."""
    ids, mask = tokens(2, length), torch.ones(2, length, dtype=torch.long)
    ids[1, :pads], mask[1, :pads] = 0, 0
    return ids, mask


# ---------------------------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("name", [*FAMILIES, "bert-base", "gpt-117m", "transformer-base"])
def test_presets_and_saved_configs_load_unchanged(name, tmp_path):
    """Today's presets and saved configs (without the new fields) keep absolute positions and their weights."""
    config = preset(name)
    assert config.position_embedding_type == ("sinusoidal" if "transformer" in name else "absolute")
    assert config.relative_attention is None and config.uses_absolute_positions
    assert config.max_relative_position is None and config.absolute_and_relative is False
    new_fields = ("max_relative_position", "absolute_and_relative")
    if "transformer" not in name:  # BERT and GPT configs had no `position_embedding_type` before
        new_fields += ("position_embedding_type",)
    saved = {key: value for key, value in config.to_dict().items() if key not in new_fields}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = AutoConfig.from_pretrained(tmp_path).to_dict()
    assert {**loaded, "_name_or_path": ""} == {**config.to_dict(), "_name_or_path": ""}
    if "tiny" in name:
        model = FAMILIES[name](config)
        assert not [key for key in model.state_dict() if "relative" in key]
        assert all(table is not None for table in _absolute_position_tables(model))


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("fields, fragment", [
    ({"position_embedding_type": "rotary"}, "`position_embedding_type` must be one of"),
    ({"position_embedding_type": "relative"}, ("`max_relative_position` (the clipping distance k) must be an integer"
                                               " >= 1 with `position_embedding_type`='relative', got None")),
    ({"position_embedding_type": "relative-keys", "max_relative_position": 0}, "must be an integer >= 1"),
    ({"position_embedding_type": "relative", "max_relative_position": -3}, "got -3"),
    ({"position_embedding_type": "relative", "max_relative_position": 2.5}, "got 2.5"),
    ({"position_embedding_type": "relative", "max_relative_position": True}, "got True"),
    ({"max_relative_position": 4}, ("`max_relative_position` and `absolute_and_relative` apply to "
                                    "`position_embedding_type` ('relative', 'relative-keys') only")),
    ({"absolute_and_relative": True}, "absolute_and_relative=True"),
    ({"position_embedding_type": "relative", "max_relative_position": 4, "absolute_and_relative": "yes"},
     "`absolute_and_relative` must be True or False"),
])
def test_bad_position_configs_fail_when_the_config_is_built(name, fields, fragment):
    with pytest.raises(ValueError) as error:
        preset(name, **fields)
    assert fragment in str(error.value)


@pytest.mark.parametrize("name, allowed", [
    ("bert-tiny", "('absolute',) (absolute positions) or ('relative', 'relative-keys')"),
    ("gpt-tiny", "('absolute',) (absolute positions) or ('relative', 'relative-keys')"),
    ("transformer-tiny", "('sinusoidal', 'learned') (absolute positions) or ('relative', 'relative-keys')"),
])
def test_unknown_position_type_lists_the_family_values(name, allowed):
    with pytest.raises(ValueError, match="got 'rotary'") as error:
        preset(name, position_embedding_type="rotary")
    assert allowed in str(error.value)


def _absolute_position_tables(model) -> list:
    """The absolute position embedding modules of a BERT, GPT or Transformer head (None where switched off)."""
    if isinstance(model, LineageBertForMaskedLM):
        return [model.bert.embeddings.position_embeddings]
    if isinstance(model, LineageGptForCausalLM):
        return [model.transformer.embed_positions]
    return [model.model.encoder.embed_positions, model.model.decoder.embed_positions]


def _attentions(model) -> list[LineageAttention]:
    return [module for module in model.modules() if isinstance(module, LineageAttention)]


@pytest.mark.parametrize("setting", SETTINGS)
def test_tables_per_self_attention_layer_and_absolute_positions_by_setting(setting):
    """2k+1 vectors of head size per self-attention layer (shared by its heads), none on cross attention; absolute
    position embeddings only for `absolute` and `both`."""
    for name in FAMILIES:
        model = build(name, setting)
        attentions = _attentions(model)
        for attention in attentions:
            keys, values = attention.relative_keys, attention.relative_values
            if attention.is_cross_attention or setting == "absolute":
                assert keys is None and values is None
                continue
            assert keys.weight.shape == (2 * K + 1, attention.head_dim)
            assert (values is None) == (setting == "relative-keys")
        assert any(a.is_cross_attention for a in attentions) == (name == "transformer-tiny")
        absolute = setting in ("absolute", "both")
        assert all((table is not None) == absolute for table in _absolute_position_tables(model))


# ---------------------------------------------------------------------------------------------- the formula


def naive_relative_attention(q, k, v, table_k, table_v, clip: int, allowed: torch.Tensor, offset: int):
    """Shaw et al. (2018) eqs. 2-5 written out: a^K_ij = w^K_clip(j-i,k), e_ij = q_i (k_j + a^K_ij)^T / sqrt(d),
    alpha = softmax_j(e), z_i = sum_j alpha_ij (v_j + a^V_ij); query i sits at position offset + i (the last T of
    S positions). Builds the (T, S, D) tensors of gathered vectors the layer avoids."""
    length, total, dim = q.shape[2], k.shape[2], q.shape[3]
    i = torch.arange(length)[:, None] + offset
    j = torch.arange(total)[None, :]
    a_k = table_k[(j - i).clamp(-clip, clip) + clip]  # (T, S, D)
    e = (torch.einsum("bhtd,bhsd->bhts", q, k) + torch.einsum("bhtd,tsd->bhts", q, a_k)) / math.sqrt(dim)
    alpha = torch.softmax(e.masked_fill(~allowed, float("-inf")), dim=-1)
    z = torch.einsum("bhts,bhsd->bhtd", alpha, v)
    if table_v is not None:
        z = z + torch.einsum("bhts,tsd->bhtd", alpha, table_v[(j - i).clamp(-clip, clip) + clip])
    return z, alpha


def _mask(allowed: torch.Tensor, implementation: str) -> torch.Tensor:
    """(B, 1, T, S) allowed pairs in the format transformers prepares: eager additive float, sdpa bool."""
    if implementation == "sdpa":
        return allowed
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal, padded", [(False, False), (False, True), (True, False), (True, True)])
def test_attention_follows_the_papers_equations(implementation, kind, causal, padded):
    config = preset("gpt-tiny", position_embedding_type=kind, max_relative_position=K, attention_probs_dropout_prob=0.0)
    config._attn_implementation = implementation
    layer = LineageAttention(config, 0, is_causal=causal).eval()
    for table in (layer.relative_keys, layer.relative_values):
        if table is not None:
            torch.nn.init.normal_(table.weight)  # large enough that a wrong distance shows
    hidden = torch.randn(2, 7, 32)
    allowed = torch.ones(2, 1, 7, 7, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    if padded:
        allowed[1, :, :, :2] = False  # two left-padding keys in the second row
        allowed[1, :, :2, 0] = True  # padding queries keep one key (rows that are all masked are undefined)
    mask = _mask(allowed, implementation) if padded or implementation == "eager" else None  # sdpa: None = causal
    output, weights = layer(hidden, mask, output_attentions=True)
    q, k, v = (layer._heads(projection(hidden)) for projection in (layer.q_proj, layer.k_proj, layer.v_proj))
    values = layer.relative_values.weight if layer.relative_values is not None else None
    z, alpha = naive_relative_attention(q, k, v, layer.relative_keys.weight, values, K, allowed, offset=0)
    expected = layer.o_proj(z.transpose(1, 2).reshape(2, 7, 32))
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, alpha, atol=1e-6, rtol=1e-5)
    without_weights, _ = layer(hidden, mask)  # the fastest path for this kind and implementation
    torch.testing.assert_close(without_weights, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_queries_are_the_last_positions_of_a_longer_key_sequence(kind):
    """With keys cached before the queries (S > T) and no index given, query t sits at position S - T + t."""
    config = preset("gpt-tiny", position_embedding_type=kind, max_relative_position=K)
    config._attn_implementation = "eager"
    layer = LineageAttention(config, 0, is_causal=True).eval()
    torch.nn.init.normal_(layer.relative_keys.weight)
    query, key, value = torch.randn(1, 4, 3, 8), torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8)
    index = layer._relative_index(None, 3, 8, query.device)
    output, _ = eager_attention_forward(layer, query, key, value, None, layer.scaling, relative_position_index=index)
    allowed = torch.ones(3, 8, dtype=torch.bool).tril(5)
    values = layer.relative_values.weight if layer.relative_values is not None else None
    z, _ = naive_relative_attention(query, key, value, layer.relative_keys.weight, values, K, allowed, offset=5)
    torch.testing.assert_close(output, z.transpose(1, 2), atol=1e-5, rtol=1e-5)


def test_distances_beyond_k_share_one_vector():
    """Clipping: every key k or more positions away on one side gets the same table row, so with content-free keys
    and values (zero projections) their attention weights are equal; within k they differ."""
    config = preset("bert-tiny", position_embedding_type="relative", max_relative_position=K)
    config._attn_implementation = "eager"
    layer = LineageAttention(config, 0).eval()
    torch.nn.init.normal_(layer.relative_keys.weight)
    torch.nn.init.zeros_(layer.k_proj.weight)
    torch.nn.init.zeros_(layer.k_proj.bias)
    _, weights = layer(torch.randn(1, 9, 32), output_attentions=True)  # (1, H, 9, 9)
    row = weights[0, :, 4]  # (H, 9): the query at position 4, keys at distances -4..4
    for far in (1, 2, 6, 7):  # distances -3, -2 share -4's vector; +2, +3 share +4's
        torch.testing.assert_close(row[:, far], row[:, 0 if far < 4 else 8], atol=0, rtol=0)
    assert (row[:, 2] - row[:, 3]).abs().min() > 1e-4 and (row[:, 5] - row[:, 6]).abs().min() > 1e-4
    index = relative_position_index(torch.arange(9)[None], torch.arange(9)[None], K)
    assert index.min() == 0 and index.max() == 2 * K and torch.equal(index[0].diagonal(), torch.full((9,), K))


@pytest.mark.parametrize("implementation, kind, expected", [
    ("sdpa", "relative-keys", sdpa_relative_keys_forward),
    ("flash_attention_2", "relative-keys", sdpa_relative_keys_forward),  # flash kernels take no additive bias
    ("eager", "relative-keys", eager_attention_forward),
    ("sdpa", "relative", eager_attention_forward),
    ("eager", "relative", eager_attention_forward),
])
def test_kernel_choice(implementation, kind, expected):
    config = preset("gpt-tiny", position_embedding_type=kind, max_relative_position=K)
    config._attn_implementation = implementation
    layer = LineageAttention(config, 0, is_causal=True)
    assert layer._kernel(output_attentions=False) is expected
    assert layer._kernel(output_attentions=True) is eager_attention_forward  # only eager returns the weights


# ---------------------------------------------------------------------------------------------- whole models


def _forward(model, ids, mask=None, **kwargs):
    if isinstance(model, LineageTransformerForConditionalGeneration):
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids, use_cache=False, **kwargs)
    return model(input_ids=ids, attention_mask=mask, **kwargs)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("kind", KINDS)
def test_eager_and_sdpa_agree_with_padding(name, kind):
    eager = build(name, kind, attn="eager")
    sdpa = build(name, kind, attn="sdpa")
    sdpa.load_state_dict(eager.state_dict())
    ids, mask = left_padded()
    real = mask.bool()
    torch.testing.assert_close(_forward(sdpa, ids, mask).logits[real], _forward(eager, ids, mask).logits[real],
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["bert-tiny", "gpt-tiny"])
@pytest.mark.parametrize("setting", ["relative", "relative-keys", "both"])
def test_shift_invariance(name, setting):
    """The same tokens at other absolute positions give the same attention weights and outputs when absolute
    positions are off, and different ones when they are on (`both`)."""
    model = build(name, setting, attn="eager")
    ids = tokens(1, 8)
    here = model(input_ids=ids, position_ids=torch.arange(8)[None], output_attentions=True)
    there = model(input_ids=ids, position_ids=torch.arange(8)[None] + 17, output_attentions=True)
    same = all(torch.allclose(a, b, atol=1e-6) for a, b in zip(here.attentions, there.attentions))
    assert same == (setting != "both")
    assert torch.allclose(here.logits, there.logits, atol=1e-5) == (setting != "both")


@pytest.mark.parametrize("name", ["bert-tiny", "gpt-tiny"])
@pytest.mark.parametrize("kind", KINDS)
def test_padding_does_not_change_real_tokens(name, kind):
    """Right padding (BERT) or left padding (GPT) leaves the outputs of the real tokens as without it."""
    model = build(name, kind)
    ids, mask = left_padded()
    if name == "bert-tiny":
        ids, mask = ids.flip(-1), mask.flip(-1)
    outputs = model(input_ids=ids, attention_mask=mask).logits
    alone = model(input_ids=ids[1:, mask[1].bool()]).logits
    torch.testing.assert_close(outputs[1, mask[1].bool()], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("setting", ["relative", "relative-keys", "both"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gpt_cached_decoding_equals_the_full_pass_with_left_padding(setting, attn):
    model = build("gpt-tiny", setting, attn=attn)
    ids, mask = left_padded(length=10)
    full = model(input_ids=ids, attention_mask=mask).logits
    step = model(input_ids=ids[:, :4], attention_mask=mask[:, :4], use_cache=True)
    logits, cache = [step.logits], step.past_key_values
    for t in range(4, 10, 2):  # two new tokens per step: queries and keys both at an offset
        step = model(input_ids=ids[:, t:t + 2], attention_mask=mask[:, :t + 2], cache=cache, use_cache=True)
        logits.append(step.logits)
    real = mask.bool()
    torch.testing.assert_close(torch.cat(logits, 1)[real], full[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("setting", ["relative", "relative-keys", "both"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_transformer_cached_decoding_equals_the_full_pass(setting, attn):
    model = build("transformer-tiny", setting, attn=attn)
    source, target = tokens(2, 7), tokens(2, 9)
    source_mask = torch.ones(2, 7, dtype=torch.long)
    source_mask[1, 5:] = 0
    full = model(input_ids=source, attention_mask=source_mask, decoder_input_ids=target, use_cache=False).logits
    step = model(input_ids=source, attention_mask=source_mask, decoder_input_ids=target[:, :3], use_cache=True)
    memory, logits, cache = (step.encoder_last_hidden_state,), [step.logits], step.past_key_values
    for t in range(3, 9):
        step = model(encoder_outputs=memory, attention_mask=source_mask, decoder_input_ids=target[:, t:t + 1],
                     cache=cache, use_cache=True)
        logits.append(step.logits)
    torch.testing.assert_close(torch.cat(logits, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("setting", ["relative", "relative-keys"])
def test_gpt_generate_with_cache_equals_without_left_padding_and_beams(setting):
    model = build("gpt-tiny", setting)
    ids, mask = left_padded(length=6, pads=2)
    for options in ({"num_beams": 1}, {"num_beams": 3}):
        kwargs = dict(attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0, **options)
        cached = model.generate(ids, **kwargs, output_logits=True, return_dict_in_generate=True)
        uncached = model.generate(ids, use_cache=False, **kwargs, output_logits=True, return_dict_in_generate=True)
        assert torch.equal(cached.sequences, uncached.sequences)
        torch.testing.assert_close(torch.stack(cached.logits), torch.stack(uncached.logits), atol=1e-5, rtol=1e-5)
    static = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0,
                            cache_implementation="static")
    alone = model.generate(ids[1:, 2:], max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(static, model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                              pad_token_id=0))
    assert torch.equal(static[1, 2:], alone[0])  # the left-padded row generates as it does alone


@pytest.mark.parametrize("setting", ["relative", "relative-keys"])
def test_transformer_generate_with_cache_equals_without(setting):
    model = build("transformer-tiny", setting)
    source = tokens(2, 6)
    for options in ({"num_beams": 1}, {"num_beams": 3}):
        kwargs = dict(max_new_tokens=8, do_sample=False, output_logits=True, return_dict_in_generate=True, **options)
        cached, uncached = model.generate(source, **kwargs), model.generate(source, use_cache=False, **kwargs)
        assert torch.equal(cached.sequences, uncached.sequences)
        torch.testing.assert_close(torch.stack(cached.logits), torch.stack(uncached.logits), atol=1e-5, rtol=1e-5)


def _loss(model, ids):
    return model(input_ids=ids, labels=ids).loss  # the Transformer learns to copy: labels give its decoder inputs


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_reach_both_tables_of_every_layer(name, kind):
    model = build(name, kind).train()
    _loss(model, tokens(2, 9)).backward()
    for attention in _attentions(model):
        for table in (attention.relative_keys, attention.relative_values):
            if table is not None:
                assert table.weight.grad is not None and table.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_every_family_trains_a_step_with_each_setting(name, setting):
    model = build(name, setting).train()
    ids = tokens(4, 9)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = _loss(model, ids)
    before.backward()
    optimizer.step()
    after = _loss(model, ids)
    assert torch.isfinite(before) and after < before


# ---------------------------------------------------------------------------------------------- conversion, saving


@pytest.mark.parametrize("name", FAMILIES)
def test_to_transformers_refuses_relative_models(name):
    with pytest.raises(ValueError, match="relative position representations .* cannot be converted"):
        to_transformers(build(name, "relative-keys"))


def test_save_load_and_a_clean_process_give_the_same_outputs(tmp_path):
    ids = tokens(2, 6)
    expected = {}
    for name, setting in (("bert-tiny", "relative"), ("gpt-tiny", "relative-keys"), ("transformer-tiny", "both")):
        model = build(name, setting)
        model.save_pretrained(tmp_path / name)
        reloaded = type(model).from_pretrained(tmp_path / name)
        assert reloaded.config.position_embedding_type == model.config.position_embedding_type
        expected[name] = _forward(model, ids).logits
        torch.testing.assert_close(_forward(reloaded.eval(), ids).logits, expected[name], atol=0, rtol=0)
    code = (
        "import json, torch\n"
        "from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM\n"
        f"ids = torch.tensor({ids.tolist()})\n"
        "out = {}\n"
        "for name, auto in (('bert-tiny', AutoModelForMaskedLM), ('gpt-tiny', AutoModelForCausalLM),\n"
        "                   ('transformer-tiny', AutoModelForSeq2SeqLM)):\n"
        "    model = auto.from_pretrained(name, trust_remote_code=True).eval()\n"
        "    extra = {'decoder_input_ids': ids, 'use_cache': False} if 'transformer' in name else {}\n"
        "    with torch.no_grad():\n"
        "        out[name] = model(input_ids=ids, **extra).logits.tolist()\n"
        "print(json.dumps(out))\n"
    )
    loaded = json.loads(run_clean_process(code, tmp_path).strip().splitlines()[-1])
    for name, logits in expected.items():
        torch.testing.assert_close(torch.tensor(loaded[name]), logits.detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("recipe", ["relative-translation", "relative-gpt-python-docs"])
def test_measurement_recipes_build_relative_models(recipe):
    from train.run.recipes import load_recipe

    loaded = load_recipe(recipe)
    config = preset(loaded.model, **loaded.model_overrides)
    assert (config.relative_attention, config.max_relative_position, config.uses_absolute_positions) == (
        "relative", 16, False)
