"""On a CUDA device (marker `gpu`, deselected by default; `python -m pytest -m gpu` on a machine with a GPU): every
family gives the CPU's fp32 outputs, trains under bf16 autocast, agrees between eager and sdpa (and flash
attention where installed) in half precision, generates on the device, and the training engine runs a recipe in
bf16 and reports its throughput."""

import importlib.util

import pytest
import torch
from conftest import preset

from modeling import (
    LineageBertForPreTraining,
    LineageGptForCausalLM,
    LineageTransformerForConditionalGeneration,
)
from train import pretrain_gpt

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
DEVICE = torch.device("cuda")
FAMILIES = {
    "bert": (LineageBertForPreTraining, "bert-tiny"),
    "gpt": (LineageGptForCausalLM, "gpt-tiny"),
    "transformer": (LineageTransformerForConditionalGeneration, "transformer-tiny"),
}


@pytest.fixture(autouse=True)
def _exact_fp32():
    """fp32 on the GPU as on the CPU: no TF32 matmuls while comparing the two."""
    previous = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous


def build(family: str, attn: str = "sdpa", **overrides) -> torch.nn.Module:
    model_class, name = FAMILIES[family]
    config = preset(name, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **overrides)
    config._attn_implementation = attn
    return model_class(config).eval()


def inputs(family: str, device: torch.device) -> dict[str, torch.Tensor]:
    """A padded batch of 3 rows with labels, on `device`."""
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 99, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 8:] = attention_mask[2, 5:] = 0
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": input_ids.clone()}
    if family == "bert":
        batch["next_sentence_label"] = torch.tensor([0, 1, 0])
    elif family == "transformer":
        batch["labels"] = torch.randint(5, 99, (3, 9), generator=generator)
    return {k: v.to(device) for k, v in batch.items()}


def logits(output) -> torch.Tensor:
    return output.prediction_logits if hasattr(output, "prediction_logits") else output.logits


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fp32_on_the_gpu_equals_the_cpu(family):
    model = build(family)
    cpu_inputs = inputs(family, torch.device("cpu"))
    expected = model(**cpu_inputs)
    actual = model.to(DEVICE)(**inputs(family, DEVICE))
    real = cpu_inputs["attention_mask"].bool() if family != "transformer" else slice(None)
    torch.testing.assert_close(logits(actual).cpu()[real], logits(expected)[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(actual.loss.cpu(), expected.loss, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_bf16_autocast_trains_and_stays_close_to_fp32(family):
    model = build(family).to(DEVICE).train()
    batch = inputs(family, DEVICE)
    reference = model(**batch).loss.item()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    assert torch.isfinite(loss) and abs(loss.item() - reference) < 0.05 * reference
    grads = [p.grad for p in model.parameters() if p.requires_grad and p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_eager_equals_sdpa_in_half_precision(family, dtype):
    eager = build(family, "eager").to(DEVICE, dtype)
    sdpa = build(family, "sdpa").to(DEVICE, dtype)
    sdpa.load_state_dict(eager.state_dict())
    batch = inputs(family, DEVICE)
    real = batch["attention_mask"].bool() if family != "transformer" else slice(None)
    torch.testing.assert_close(logits(sdpa(**batch))[real].float(), logits(eager(**batch))[real].float(),
                               atol=5e-2, rtol=5e-2)


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="flash-attn is not installed")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_flash_attention_equals_sdpa(family):
    sdpa = build(family, "sdpa").to(DEVICE, torch.bfloat16)
    flash = build(family, "flash_attention_2").to(DEVICE, torch.bfloat16)
    flash.load_state_dict(sdpa.state_dict())
    batch = inputs(family, DEVICE)
    real = batch["attention_mask"].bool() if family != "transformer" else slice(None)
    torch.testing.assert_close(logits(flash(**batch))[real].float(), logits(sdpa(**batch))[real].float(),
                               atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("family", ["gpt", "transformer"])
def test_generation_on_the_gpu_matches_a_cpu_forward_step_by_step(family):
    model = build(family, eos_token_id=None).to(DEVICE)
    batch = inputs(family, DEVICE)
    if family == "gpt":  # a decoder-only model continues the prompt: pad on the left
        batch["attention_mask"] = batch["attention_mask"].flip(1)
    out = model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=6,
                         do_sample=False, return_dict_in_generate=True, output_logits=True)
    model = model.cpu()
    sequences, mask = out.sequences.cpu(), batch["attention_mask"].cpu()
    if family == "gpt":  # the whole sequence through the decoder, prompt padding masked
        full_mask = torch.cat([mask, torch.ones(3, 6, dtype=mask.dtype)], 1)
        full = model(sequences, attention_mask=full_mask).logits[:, mask.shape[1] - 1:-1]
    else:  # the decoder over everything generated, after its start token
        full = model(batch["input_ids"].cpu(), attention_mask=mask, decoder_input_ids=sequences[:, :-1]).logits
    for step, step_logits in enumerate(out.logits):
        torch.testing.assert_close(step_logits.cpu(), full[:, step], atol=1e-4, rtol=1e-4)


def test_engine_runs_a_recipe_in_bf16_and_reports_throughput(tmp_path):
    results, folder = pretrain_gpt.main([
        "--recipe", "gpt-pretrain-tiny", "--output_dir", str(tmp_path / "gpt"),
        "--mixed_precision", "bf16", "--progress_bar", "false", "--save_steps", "0",
    ])
    assert results["steps"] == 6 and results["train_loss"] > 0
    assert results.get("tokens_per_s", 0) > 0
    assert (folder / "model.safetensors").is_file()
