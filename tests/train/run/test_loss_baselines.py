"""Stored loss baselines (as torchtitan keeps its loss curves): the first per-step training losses of every
training command on its tiny recipe, fp32 on a CPU, compared with the values recorded from the code.

A refactor proves "behaviour unchanged" by these passing; a change that means to move a curve updates its values
in the same commit and says why."""

import json
from pathlib import Path

import pytest
import torch

from train import finetune, pretrain_bert, pretrain_gpt, train_translation

STEPS = 4
# the per-step `loss` of logs/metrics.jsonl, one optimizer step each (logging_steps 1)
BASELINES = {
    "bert-pretrain-tiny": (pretrain_bert.main, [7.090561866760254, 7.075498104095459, 7.066965103149414,
                                                7.042288780212402]),
    "gpt-pretrain-tiny": (pretrain_gpt.main, [6.402458190917969, 6.3991618156433105, 6.376776695251465,
                                              6.367335796356201]),
    "transformer-translation-tiny": (train_translation.main, [6.1754560470581055, 5.492969989776611,
                                                              5.345412731170654, 5.02918815612793]),
    "rnn-translation-tiny": (train_translation.main, [5.703970432281494, 5.699031352996826, 5.69355583190918,
                                                      5.686276435852051]),
    "bert-finetune-nli-tiny": (finetune.main, [1.10120689868927, 1.1077529191970825, 1.098375916481018,
                                               1.098761796951294]),
    "gpt-finetune-nli-tiny": (finetune.main, [4.29331636428833, 4.349635124206543, 4.2536115646362305,
                                              4.284284591674805]),
}


@pytest.mark.parametrize("recipe", list(BASELINES))
def test_first_losses_match_the_stored_baseline(recipe, tmp_path, monkeypatch):
    main, expected = BASELINES[recipe]
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")  # the baselines are CPU fp32 ones, on a GPU machine too
    torch.set_num_threads(1)  # a CPU kernel's reduction order depends on the thread count
    _, folder = main(["--recipe", recipe, "--output_dir", str(tmp_path / "run"),
                      "--max_steps", str(STEPS), "--logging_steps", "1", "--eval_size", "4", "--save_steps", "0",
                      "--mixed_precision", "'no'",  # quoted: YAML reads a bare no as false
                      "--report_to", "none", "--progress_bar", "false"])
    records = [json.loads(line) for line in (Path(folder).parent / "logs/metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses == pytest.approx(expected, abs=1e-6, rel=0)
