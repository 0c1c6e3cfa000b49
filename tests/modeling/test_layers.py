"""The shared core: the linear layer's CPU inference kernel, attention (bidirectional, causal, cross;
eager == sdpa; masks; KV cache), feed-forward, the residual sublayer's two norm placements, and position
encodings."""

import math

import pytest
import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.models.marian.modeling_marian import (
    MarianSinusoidalPositionalEmbedding,
)

from modeling import linear
from modeling.configuration_lineage_common import LineageConfig
from modeling.layers import (
    LineageAttention,
    LineageBlock,
    LineageFeedForward,
    ResidualSublayer,
    SinusoidalPositionalEmbedding,
    sinusoidal_table,
)
from modeling.linear import LineageLinear


def config(implementation: str = "sdpa", **overrides) -> LineageConfig:
    fields = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    result = LineageConfig(**{**fields, **overrides})
    result._attn_implementation = implementation
    return result


def additive_mask(keep: torch.Tensor, length: int, causal: bool) -> torch.Tensor:
    """(B, S) 0/1 key mask -> (B, 1, T, S) additive float mask, optionally causal (the eager format)."""
    allowed = keep[:, None, None, :].bool().expand(-1, 1, length, -1)
    if causal:
        allowed = allowed & torch.ones(length, keep.shape[1], dtype=torch.bool).tril(keep.shape[1] - length)
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)


needs_onednn = pytest.mark.skipif(linear._ONEDNN_LINEAR is None, reason="this torch build has no oneDNN linear")


@pytest.fixture
def onednn_calls(monkeypatch) -> list[tuple[int, ...]]:
    """Records the input shape of every call that took the oneDNN kernel; small test layers qualify."""
    calls, kernel = [], linear._ONEDNN_LINEAR

    def spy(input, *args, **kwargs):
        calls.append(tuple(input.shape))
        return kernel(input, *args, **kwargs)

    monkeypatch.setattr(linear, "_ONEDNN_LINEAR", spy)
    monkeypatch.setattr(linear, "_ONEDNN_MIN_WEIGHTS", 0)
    return calls


@needs_onednn
def test_linear_inference_kernel_serves_large_weights_only(onednn_calls, monkeypatch):
    monkeypatch.setattr(linear, "_ONEDNN_MIN_WEIGHTS", 2**18)
    small, large = LineageLinear(128, 128), LineageLinear(512, 512)
    x = torch.randn(1, 512)
    with torch.inference_mode():
        small(x[:, :128])
        fast = large(x)
    assert onednn_calls == [(1, 512)]
    torch.testing.assert_close(fast, torch.nn.functional.linear(x, large.weight, large.bias), atol=1e-5, rtol=1e-5)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(32,), (1, 1, 32), (3, 32), (2, 3, 4, 32), (0, 32), "strided", "expanded"])
def test_linear_inference_kernel_matches_nn_linear(onednn_calls, shape, bias):
    linear = LineageLinear(32, 48, bias=bias)
    layouts = {"strided": lambda: torch.randn(2, 64)[:, ::2],
               "expanded": lambda: torch.randn(2, 1, 32).expand(2, 5, 32)}
    x = layouts[shape]() if shape in layouts else torch.randn(shape)
    with torch.inference_mode():
        fast = linear(x)
    torch.testing.assert_close(fast, torch.nn.functional.linear(x, linear.weight, linear.bias), atol=1e-5, rtol=1e-5)
    assert onednn_calls == [tuple(x.shape)]


@needs_onednn
def test_linear_training_autocast_and_other_dtypes_take_f_linear(onednn_calls, monkeypatch):
    linear = LineageLinear(32, 48)
    x = torch.randn(5, 32)
    linear(x).sum().backward()  # autograd on: the reference kernel, with gradients
    assert linear.weight.grad is not None
    with torch.no_grad():
        assert torch.equal(linear.bfloat16()(x.bfloat16()), torch.nn.functional.linear(x.bfloat16(), linear.weight,
                                                                                       linear.bias))
        linear.float()
        linear.bias = torch.nn.Parameter(torch.randn(96)[::2])  # a strided bias: the kernel would misread it
        assert torch.equal(linear(x), torch.nn.functional.linear(x, linear.weight, linear.bias))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert linear(x).dtype == torch.bfloat16
        monkeypatch.setattr(LineageLinear, "fast_cpu_inference", False)
        assert torch.equal(linear(x), torch.nn.functional.linear(x, linear.weight, linear.bias))
    assert onednn_calls == []


@pytest.mark.parametrize("causal", [False, True])
def test_eager_equals_sdpa_with_padding(causal):
    attention = LineageAttention(config(), layer_idx=0, is_causal=causal).eval()
    hidden = torch.randn(3, 7, 32)
    keep = torch.ones(3, 7, dtype=torch.long)
    keep[1, 5:] = 0
    mask = additive_mask(keep, 7, causal)
    sdpa_out, sdpa_weights = attention(hidden, mask == 0)  # the sdpa format: boolean, True = attend
    attention.config._attn_implementation = "eager"
    eager_out, eager_weights = attention(hidden, mask)
    assert sdpa_weights is None and eager_weights.shape == (3, 4, 7, 7)
    torch.testing.assert_close(eager_out, sdpa_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(eager_weights.sum(-1), torch.ones(3, 4, 7))
    assert eager_weights[1, :, :, 5:].abs().max() == 0
    if causal:
        assert torch.triu(eager_weights, diagonal=1).abs().max() == 0


def test_sdpa_output_attentions_falls_back_to_eager_and_causal_without_mask():
    attention = LineageAttention(config(), layer_idx=0, is_causal=True).eval()
    hidden = torch.randn(2, 6, 32)
    out, weights = attention(hidden, None, output_attentions=True)
    assert weights is not None and torch.triu(weights, diagonal=1).abs().max() == 0
    plain, none = attention(hidden, None)
    assert none is None
    torch.testing.assert_close(out, plain, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_causal_attention_never_looks_ahead(implementation):
    attention = LineageAttention(config(implementation), layer_idx=0, is_causal=True).eval()
    hidden = torch.randn(2, 8, 32)
    changed = hidden.clone()
    changed[:, 5:] = torch.randn(2, 3, 32)
    before, _ = attention(hidden, None)
    after, _ = attention(changed, None)
    torch.testing.assert_close(before[:, :5], after[:, :5])
    assert not torch.allclose(before[:, 5:], after[:, 5:])


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_incremental_decoding_with_cache_equals_full_pass(implementation):
    cfg = config(implementation)
    block = LineageBlock(cfg, layer_idx=0, is_causal=True).eval()
    hidden = torch.randn(2, 6, 32)
    full, _, _ = block(hidden)
    cache = DynamicCache(config=cfg)
    prefix, _, _ = block(hidden[:, :3], cache=cache)
    steps = [prefix]
    for t in range(3, 6):
        step, _, _ = block(hidden[:, t:t + 1], cache=cache)
        steps.append(step)
    assert cache.get_seq_length() == 6
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_cross_attention_keys_and_values_are_projected_once_per_generation():
    cfg = config()
    block = LineageBlock(cfg, layer_idx=0, is_causal=True, has_cross_attention=True).eval()
    encoder = torch.randn(2, 5, 32)
    target = torch.randn(2, 4, 32)
    full, _, _ = block(target, None, encoder)
    calls = []
    block.cross_attn.sublayer.k_proj.register_forward_hook(lambda *args: calls.append(1))
    cache = EncoderDecoderCache(DynamicCache(config=cfg), DynamicCache(config=cfg))
    steps = [block(target[:, t:t + 1], None, encoder, cache=cache)[0] for t in range(4)]
    assert len(calls) == 1
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_cross_attention_is_never_causal_under_sdpa():
    attention = LineageAttention(config(), layer_idx=0, is_cross_attention=True).eval()
    query, memory = torch.randn(1, 4, 32), torch.randn(1, 4, 32)
    out, _ = attention(query, None, memory)
    changed = memory.clone()
    changed[:, -1] += 1.0  # the last memory position must influence the first query
    assert not torch.allclose(out[:, 0], attention(query, None, changed)[0][:, 0])


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_residual_sublayer_norm_placement(norm_position):
    cfg = config(norm_position=norm_position)
    sublayer = torch.nn.Linear(32, 32)
    residual = ResidualSublayer(sublayer, cfg).eval()
    with torch.no_grad():
        residual.norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 32)
    expected = residual.norm(x + sublayer(x)) if norm_position == "post" else x + sublayer(residual.norm(x))
    torch.testing.assert_close(residual(x), expected)


@pytest.mark.parametrize("activation, function", [
    ("relu", torch.relu), ("gelu", lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))),
    ("gelu_new", lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))),
    ("silu", lambda x: x * torch.sigmoid(x)),
])
@pytest.mark.parametrize("gated", [False, True])
def test_feed_forward(activation, function, gated):
    ffn = LineageFeedForward(config(hidden_act=activation, gated_ffn=gated))
    x = torch.randn(2, 3, 32)
    inner = function(ffn.gate_proj(x)) * ffn.up_proj(x) if gated else function(ffn.up_proj(x))
    torch.testing.assert_close(ffn(x), ffn.down_proj(inner), atol=1e-6, rtol=1e-5)


def test_sinusoidal_table_follows_the_paper():
    table = sinusoidal_table(50, 16)
    for pos in (0, 7, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    # relative positions are linear functions of absolute ones (section 3.5): PE(pos+k) = R(k) PE(pos)
    # R(k) is block diagonal, one 2x2 rotation by angle k * w_i per (sin, cos) pair, and does not depend on pos
    k = 3
    rotation = torch.zeros(16, 16, dtype=torch.float64)
    for i in range(8):
        angle = k / 10000 ** (2 * i / 16)
        rotation[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor(
            [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=torch.float64
        )
    shifted = table[:40 - k].double() @ rotation
    torch.testing.assert_close(shifted, table[k:40].double(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("dim", [16, 15])
def test_split_sinusoidal_layout_matches_marian(dim):
    marian = MarianSinusoidalPositionalEmbedding(40, dim)
    torch.testing.assert_close(sinusoidal_table(40, dim, interleaved=False), marian.create_weight())


def test_sinusoidal_embedding_is_not_saved():
    module = SinusoidalPositionalEmbedding(10, 8)
    assert "weight" not in module.state_dict()
    torch.testing.assert_close(module(torch.tensor([[3]]))[0, 0], sinusoidal_table(10, 8)[3])
