"""Saved code across the supported transformers range: a model of each family saved with its code under the
installed transformers loads, with `trust_remote_code=True` in a clean process without this project, under the
release at the other end of the range, and generates the tokens it generates here (greedy and beam search, a
padded batch). `.ci/run` runs it in both of its environments, `LINEAGE_OTHER_PYTHON` naming the other one's
interpreter."""

import json
import os

import pytest
import torch
import transformers
from conftest import preset, run_clean_process

from modeling import (
    LineageBertLMHeadModel,
    LineageGptForCausalLM,
    LineageRnnForConditionalGeneration,
    LineageTransformerForConditionalGeneration,
)

OTHER_PYTHON = os.environ.get("LINEAGE_OTHER_PYTHON")
pytestmark = pytest.mark.skipif(not OTHER_PYTHON, reason="LINEAGE_OTHER_PYTHON names no interpreter with another "
                                                         "transformers release (.ci/run sets it)")
V = 99
# model class, preset and overrides, the Auto class the saved folder is loaded with
FAMILIES = {
    "bert": (LineageBertLMHeadModel, "bert-tiny", {"is_decoder": True}, "AutoModelForCausalLM"),
    "gpt": (LineageGptForCausalLM, "gpt-tiny", {}, "AutoModelForCausalLM"),
    "transformer": (LineageTransformerForConditionalGeneration, "transformer-tiny", {}, "AutoModelForSeq2SeqLM"),
    "rnn": (LineageRnnForConditionalGeneration, "rnn-tiny", {"attention": "bahdanau"}, "AutoModelForSeq2SeqLM"),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_model_saved_here_generates_the_same_tokens_under_the_other_transformers(family, tmp_path):
    model_class, name, overrides, auto_class = FAMILIES[family]
    model = model_class(preset(name, eos_token_id=None, **overrides)).eval()
    folder = tmp_path / family
    model.save_pretrained(folder)
    ids = torch.randint(5, V, (2, 6))
    padded = [[1] * 6, [1] * 4 + [0] * 2] if model.config.is_encoder_decoder else [[0, 0] + [1] * 4, [1] * 6]
    mask = torch.tensor(padded)  # right padding for a source, left padding for a prompt
    settings = [{"num_beams": 1}, {"num_beams": 3}]
    expected = [model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0,
                               **setting).tolist() for setting in settings]
    code = f"""
import json, torch, transformers
model = transformers.{auto_class}.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
ids, mask = torch.tensor({ids.tolist()}), torch.tensor({mask.tolist()})
tokens = [model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=0, **s).tolist()
          for s in {settings!r}]
print(json.dumps({{"version": transformers.__version__, "module": type(model).__module__, "tokens": tokens}}))
"""
    result = json.loads(run_clean_process(code, tmp_path, OTHER_PYTHON).strip().splitlines()[-1])
    assert result["version"] != transformers.__version__, "LINEAGE_OTHER_PYTHON has the same transformers release"
    assert result["module"].startswith("transformers_modules")
    assert result["tokens"] == expected
