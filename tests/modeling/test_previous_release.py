"""Folders saved by the previous release load with today's classes and give its outputs bit for bit.

`tests/fixtures/release-e597024/<family>` holds what that release (commit e597024, the last before the papers' config
names, `shift_labels` and the keyword-only helpers) saved of a tiny model of each family: its `config.json`, its
weights and the logits it gave for one input (written by that release's code, not by this test). Today's installed
classes load each folder through the Auto classes, with no warning, and give the same logits to float32 rounding: bit
for bit on a CPU like the one that wrote them; another CPU's kernels round differently (an AMD EPYC with AVX-512: at
most 1.4e-6 apart, the Transformer's logits of magnitude 3), where any change of the computation moves them by orders
of magnitude more.
"""

import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForPreTraining, AutoModelForSeq2SeqLM

import modeling  # noqa: F401  (registers the Lineage families with the Auto classes)

RELEASE = Path(__file__).parents[1] / "fixtures" / "release-e597024"
AUTO = {"lineage-bert": AutoModelForPreTraining, "lineage-gpt": AutoModelForCausalLM,
        "lineage-transformer": AutoModelForSeq2SeqLM, "lineage-rnn": AutoModelForSeq2SeqLM}
INPUT_IDS = torch.tensor([[5, 6, 7, 8, 9, 10]])  # the input the release's logits were computed on


@pytest.mark.parametrize("family", list(AUTO))
def test_a_folder_of_the_previous_release_loads_and_gives_its_logits(family):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = AUTO[family].from_pretrained(RELEASE / family).eval()
    assert type(model).__module__.startswith("modeling.")  # today's classes, not the folder's (it holds no code)
    decoder = {"decoder_input_ids": INPUT_IDS} if model.config.is_encoder_decoder else {}
    with torch.no_grad():
        output = model(input_ids=INPUT_IDS, **decoder)
    logits = output.prediction_logits if family == "lineage-bert" else output.logits
    torch.testing.assert_close(logits, load_file(RELEASE / family / "expected_logits.safetensors")["logits"],
                               rtol=1e-5, atol=1e-5)
