"""train/run/flops.py: the FLOPs formula against hand counts of presets' layers, the GPU peak table, MFU; the
`peak_tflops` recipe key; the model card's throughput line (train/run/publish.py)."""

import pytest
import torch
import transformers
from conftest import preset

import modeling
from train.run import flops, publish
from train.run.recipes import RecipeError, load_recipe, recipe_from_dict


def block_parameters(d: int, i: int, cross_attention: bool = False) -> int:
    """A post-norm block's parameters counted from its config: q k v o with biases and a LayerNorm per attention
    sublayer, up and down projections with biases and a LayerNorm."""
    attention = 4 * (d * d + d) + 2 * d
    return attention * (2 if cross_attention else 1) + (d * i + i) + (i * d + d) + 2 * d


@pytest.mark.parametrize("name", ["gpt-tiny", "gpt-117m"])
@pytest.mark.parametrize("length", [1, 64, 512])
def test_gpt_flops_per_token_match_a_hand_count(name, length):
    config = preset(name)
    with torch.device("meta"):  # shapes only: no memory, no initialisation
        model = transformers.AutoModelForCausalLM.from_config(config)
    d, i, v, layers = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    parameters = v * d + layers * block_parameters(d, i)  # the tied token embedding once; positions are a lookup
    attention = layers * 3 * 2 * 2 * d * length  # QK^T and AV per position, 2 FLOPs a multiply-add, x3 backward
    assert flops.matmul_parameters(model) == parameters
    assert flops.flops_per_token(model, length) == 6 * parameters + attention
    assert flops.training_flops(parameters, flops.attention_layers(config), d, 3, length) == (
        3 * length * flops.flops_per_token(model, length))


def test_encoder_decoder_counts_three_attention_sublayers_a_layer():
    config = preset("transformer-tiny")
    model = transformers.AutoModelForSeq2SeqLM.from_config(config)
    d, i, v, layers = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    parameters = v * d + layers * (block_parameters(d, i) + block_parameters(d, i, cross_attention=True))
    length = 10
    assert flops.matmul_parameters(model) == parameters  # one embedding, shared by both sides and the output
    assert flops.flops_per_token(model, length) == 6 * parameters + 12 * (3 * layers) * d * length


def test_rnn_flops_do_not_grow_with_the_sequence():
    model = transformers.AutoModelForSeq2SeqLM.from_config(preset("rnn-tiny"))
    assert flops.attention_layers(model.config) == 0
    assert flops.flops_per_token(model, 1) == flops.flops_per_token(model, 500) == 6 * flops.matmul_parameters(model)


def test_flops_per_token_refuses_an_empty_sequence():
    with pytest.raises(ValueError, match="seq_length must be at least 1, got 0"):
        flops.flops_per_token(transformers.AutoModelForCausalLM.from_config(preset("gpt-tiny")), 0)


def test_reference_model_has_the_same_matmul_parameters():
    from modeling.conversion import to_transformers

    lineage = transformers.AutoModelForMaskedLM.from_config(preset("bert-tiny"))
    assert flops.matmul_parameters(to_transformers(lineage)) == flops.matmul_parameters(lineage)


@pytest.mark.parametrize("name, mixed_precision, precision, peak", [
    ("NVIDIA H100 80GB HBM3", "bf16", "highest", 989.4),
    ("NVIDIA H100 80GB HBM3", "fp16", "highest", 989.4),
    ("NVIDIA H100 PCIe", "bf16", "highest", 756.0),
    ("NVIDIA H200", "no", "highest", 66.9),
    ("NVIDIA H200", "no", "high", 494.7),  # TF32 matmuls allowed
    ("NVIDIA A100-SXM4-80GB", "bf16", "highest", 312.0),
    ("NVIDIA L40S", "fp16", "highest", 362.1),
    ("Some Future GPU", "bf16", "highest", None),
])
def test_peak_table(monkeypatch, name, mixed_precision, precision, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        assert flops.peak_tflops(torch.device("cuda"), mixed_precision) == peak
    finally:
        torch.set_float32_matmul_precision(previous)
    assert flops.peak_tflops(torch.device("cpu"), mixed_precision) is None
    assert flops.peak_tflops(torch.device("cuda"), mixed_precision, 123.0) == 123.0  # the recipe's value wins
    assert flops.peak_tflops(torch.device("cpu"), mixed_precision, 123.0) == 123.0


@pytest.mark.parametrize("tokens_per_s, per_token, peak", [(1e6, 4e8, 800.0), (2.5e4, 7e5, 0.5), (1.0, 1.0, 1e-12)])
def test_mfu_is_the_achieved_share_of_the_peak(tokens_per_s, per_token, peak):
    share = flops.mfu(tokens_per_s, per_token, peak)
    assert share * peak * 1e12 == pytest.approx(tokens_per_s * per_token)
    assert flops.mfu(2 * tokens_per_s, per_token, peak) == pytest.approx(2 * share)  # linear in the speed
    assert flops.mfu(tokens_per_s, per_token, 2 * peak) == pytest.approx(share / 2)


@pytest.mark.parametrize("value", [0, -1, "-1e3", float("inf"), float("nan")])
def test_recipe_refuses_a_peak_that_is_not_positive_and_finite(value):
    with pytest.raises(RecipeError, match=r"recipe key 'peak_tflops' must be in \(0, inf\), got"):
        load_recipe("gpt-pretrain-tiny", {"peak_tflops": value})


def test_recipe_peak_is_unset_by_default_and_does_not_change_what_the_run_trains():
    default, given = recipe_from_dict({}), recipe_from_dict({"peak_tflops": 400})
    assert default.peak_tflops is None and given.peak_tflops == 400.0
    assert default.training_dict() == given.training_dict()  # a resume may set or change it


@pytest.fixture
def card(tmp_path):
    recipe = load_recipe("gpt-pretrain-tiny", {"output_dir": str(tmp_path / "run")})
    model = modeling.LineageGptForCausalLM(preset("gpt-tiny"))
    return lambda results: publish.write_model_card(tmp_path, model, recipe, results, {"torch": "2"}).read_text()


@pytest.mark.parametrize("speed, share", [(12345.6, 0.4123), (87.0, 0.0009)])
def test_card_shows_the_median_throughput_and_mfu(card, speed, share):
    text = card({"eval_loss": 1.5, "tokens_per_s": speed, "mfu": share})
    line = next(row for row in text.splitlines() if row.startswith("Training throughput"))
    assert f"{speed:,.0f} tokens/s" in line and f"{share:.1%} MFU" in line and "median" in line
    assert "| tokens_per_s |" not in text and "| mfu |" not in text and "| eval_loss | 1.5000 |" in text


def test_card_without_mfu_or_throughput_has_no_such_line(card):
    without_mfu = card({"eval_loss": 1.5, "tokens_per_s": 500.0})
    assert "500 tokens/s" in without_mfu and "MFU" not in without_mfu
    without_speed = card({"eval_loss": 1.5, "tokens_per_s": None})
    assert "Training throughput" not in without_speed and "tokens_per_s" not in without_speed
