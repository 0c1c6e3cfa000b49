"""The main job's quick variant: every step of the seed story runs, the table is written, and every folder
loads through the Auto classes."""

import json

import torch

from train import main_job

torch.set_num_threads(1)


def test_quick_main_job_runs_every_step_and_writes_the_table(tmp_path):
    rows = main_job.main(["--quick", "--output_dir", str(tmp_path), "--progress_bar", "false"])
    assert [r["name"] for r in rows] == ["bert-pretrain", "bert-nli", "gpt-pretrain", "gpt-nli", "translation",
                                         "rnn-translation"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["quick"] and summary["wall_seconds"] > 0
    loads = {r["name"]: r["loads_as"] for r in rows}
    assert loads == {"bert-pretrain": "LineageBertForPreTraining", "bert-nli": "LineageBertForSequenceClassification",
                     "gpt-pretrain": "LineageGptForCausalLM", "gpt-nli": "LineageGptForSequenceClassification",
                     "translation": "LineageTransformerForConditionalGeneration",
                     "rnn-translation": "LineageRnnForConditionalGeneration"}
    figures = {r["name"]: r["figures"] for r in rows}
    assert 0 <= figures["bert-nli"]["accuracy"] <= 1 and 0 <= figures["gpt-nli"]["accuracy"] <= 1
    assert figures["gpt-pretrain"]["perplexity"] > 1 and isinstance(figures["gpt-pretrain"]["sample_0"], str)
    assert 0 <= figures["translation"]["bleu"] <= 100 and 0 <= figures["rnn-translation"]["bleu"] <= 100
    table = (tmp_path / "summary.md").read_text()
    for name in loads:
        assert f"| {name} |" in table and str(tmp_path / name / "model") in table
    # the fine-tuned models started from the pretrained folders (their tokenizers came along)
    nli_recipe = (tmp_path / "bert-nli" / "model" / "recipe.yaml").read_text()
    assert str(tmp_path / "bert-pretrain" / "model") in nli_recipe
