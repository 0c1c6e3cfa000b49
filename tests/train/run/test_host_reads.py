"""The training loop reads nothing back from the device between records (issue 22), and neither does the model
(issue 30): every family's training command runs a few steps under a counter of `Tensor.item`, `__bool__`,
`__int__`, `__float__`, `__index__` and `tolist` (the reads that wait for the accelerator), with the same
per-micro-batch losses as before the loop stopped reading, and no read at all on a step that writes no record.

Reads are attributed to the innermost frame outside torch. Data loading (the collators, on the CPU by design) is not
counted: the collators find there what the forwards used to read back (the documents of packed rows, the real tokens
of padded ones, whether a batch holds padding; `modeling.packing.PackedSequences`), and `modeling.checks.value_checks`
turns the model's value checks off. The one read left, listed in `MODEL_INTERNAL` with its reason, is of a tensor that
lives on the host (on this CPU-only test every tensor does, so the counter cannot tell the two kinds apart).
"""

import math
import os

import pytest
import torch
from conftest import preset
from host_reads import HostReads

from modeling.checks import check_label_ids, value_checks
from modeling.modeling_lineage_gpt import LineageGptForCausalLM
from train.data.collators import CausalLMCollator, check_batch_values, value_limits
from train.finetune import main as finetune
from train.pretrain_bert import main as pretrain_bert
from train.pretrain_gpt import main as pretrain_gpt
from train.run.checkpoints import complete_checkpoints
from train.run.engine import Engine, NonFiniteLossError
from train.run.run_folder import claim
from train.train_translation import main as train_translation

# (file, function) of the reads the eager forwards still make: torch's `RNNBase.check_forward_args` reads
# `int(batch_sizes[0])` of the RNN encoder's `PackedSequence` (cuDNN's packed sequences), whose `batch_sizes` torch
# keeps on the host, so this read waits for nothing. The lengths they are packed by now come from the collate's
# `packed_sequences` (the encoder's `lengths.cpu()`, a copy this counter does not see, is gone); torch's
# `pack_padded_sequence` / `pad_packed_sequence` still move the sort order of unsorted rows to the device and back.
# Only the compiled path's padding mask (`cell_rnn`, a step per position, no fused kernel) avoids packed sequences.
MODEL_INTERNAL = {
    ("modeling_lineage_rnn.py", "forward"),
}

# Per-micro-batch losses of these runs recorded with the engine before this change (logging_steps=1, one read per
# micro-step): the loop must compute exactly the same floats.
BEFORE = {
    "pretrain_bert": [7.0668864250183105, 7.093706130981445, 7.06946325302124, 7.0450639724731445, 7.020351409912109,
                      7.046879768371582],
    "pretrain_gpt": [6.3954572677612305, 6.3999552726745605, 6.393815040588379, 6.393830299377441, 6.373763561248779,
                     6.366078853607178, 6.363481044769287, 6.3713531494140625, 6.343685150146484, 6.324725151062012,
                     6.321206092834473],
    "translation_transformer": [6.277647972106934, 5.39266300201416, 5.197685241699219, 5.176699161529541,
                                4.7286906242370605, 4.832935810089111],
    "translation_rnn": [5.703556537628174, 5.697914123535156, 5.690929889678955, 5.685840606689453, 5.666489601135254,
                        5.649998664855957],
    "finetune_bert": [1.0994948148727417, 1.099579930305481, 1.098954200744629, 1.0979700088500977, 1.095373511314392,
                      1.096865177154541],
    "finetune_gpt": [4.3114142417907715, 4.328281879425049, 4.286649703979492, 4.27909517288208, 4.27747106552124,
                     4.252842903137207],
}
COMMANDS = {
    "pretrain_bert": (pretrain_bert, "bert-pretrain-tiny", "--train_size", "48", "--eval_size", "8"),
    "pretrain_gpt": (pretrain_gpt, "gpt-pretrain-tiny", "--train_size", "40", "--eval_size", "4",
                     "--gradient_accumulation_steps", "2", "--max_new_tokens", "2"),  # 5 batches: step 3 has one
    "translation_transformer": (train_translation, "transformer-translation-tiny", "--train_size", "64",
                                "--eval_size", "2", "--max_new_tokens", "4", "--num_beams", "1"),
    "translation_rnn": (train_translation, "rnn-translation-tiny", "--train_size", "64", "--eval_size", "2",
                        "--max_new_tokens", "4", "--num_beams", "1"),
    "finetune_bert": (finetune, "bert-finetune-nli-tiny", "--train_size", "64", "--eval_size", "8"),
    "finetune_gpt": (finetune, "gpt-finetune-nli-tiny", "--train_size", "64", "--eval_size", "8"),
}


def counted_run(monkeypatch, main, argv: list[str]) -> tuple[HostReads, list[tuple[int, float]]]:
    """Run a training command under `HostReads`; also returns every micro-batch's (step, loss), read after training."""
    counter, losses = HostReads(), []
    compute, micro_step, batches, train = Engine._compute_loss, Engine._micro_step, Engine._epoch_batches, Engine.train

    def compute_loss(self, batch):
        loss = compute(self, batch)
        losses.append((self.state.step + 1, loss.detach().clone()))
        return loss

    def counted_micro_step(self, *args):
        counter.step = self.state.step + 1
        try:
            return micro_step(self, *args)
        finally:
            counter.step = ("after", self.state.step)

    def loaded_without_counting(self):
        loader = iter(batches(self))
        while True:
            counter.paused += 1
            try:
                batch = next(loader)
            except StopIteration:
                return
            finally:
                counter.paused -= 1
            yield batch

    def counted_train(self):
        with counter:
            return train(self)

    monkeypatch.setattr(Engine, "_compute_loss", compute_loss)
    monkeypatch.setattr(Engine, "_micro_step", counted_micro_step)
    monkeypatch.setattr(Engine, "_epoch_batches", loaded_without_counting)
    monkeypatch.setattr(Engine, "train", counted_train)
    main(argv)
    return counter, [(step, loss.item()) for step, loss in losses]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_host_read_between_logging_steps_and_the_same_losses(name, tmp_path, monkeypatch):
    main, recipe, *extra = COMMANDS[name]
    argv = ["--recipe", recipe, *extra, "--progress_bar", "false", "--report_to", "none",
            "--max_steps", "6", "--logging_steps", "3", "--save_steps", "0", "--output_dir", str(tmp_path / "run")]
    counter, losses = counted_run(monkeypatch, main, argv)
    # the losses of the loop that read every step (recorded with transformers 5.23; 5.24 rounds up to 5e-7 apart)
    assert [loss for _, loss in losses] == pytest.approx(BEFORE[name], rel=1e-6, abs=0)
    for step in range(1, 7):
        engine = sum(n for (path, _), n in counter.reads[step].items() if path.startswith("train"))
        model = {(path, function): n for (path, function), n in counter.reads[step].items()
                 if not path.startswith("train") and (os.path.basename(path), function) not in MODEL_INTERNAL}
        assert engine == (1 if step % 3 == 0 else 0), (step, counter.reads[step])  # one transfer per record
        assert model == {}, (step, counter.reads[step])  # value checks, documents, padding: known on the CPU
    records = [r for r in engine_history(tmp_path / "run") if "loss" in r]
    assert [r["step"] for r in records] == [3, 6]
    for record, steps in zip(records, ((1, 2, 3), (4, 5, 6))):  # a record's loss: the mean over its micro-batches
        window = [loss for step, loss in losses if step in steps]
        assert record["loss"] == pytest.approx(sum(window) / len(window), rel=1e-6)


def engine_history(run_dir) -> list[dict]:
    from train.run.run_log import read_jsonl

    return read_jsonl(run_dir / "logs" / "metrics.jsonl")


def test_a_non_finite_loss_is_caught_before_the_next_checkpoint_naming_its_step(tmp_path, monkeypatch):
    """logging_steps=10 but save_steps=2: the NaN of step 3 is read back at step 4, whose checkpoint is never
    written; the error names step 3 and the checkpoint of step 2."""
    compute = Engine._compute_loss

    def nan_at_step_3(self, batch):
        loss = compute(self, batch)
        return loss * float("nan") if self.state.step == 2 else loss

    monkeypatch.setattr(Engine, "_compute_loss", nan_at_step_3)
    out = tmp_path / "run"
    with pytest.raises(NonFiniteLossError, match=r"at step 3: training stopped at step 4 .*within logging_steps=10.*"
                                                 r"step-00000002"):
        pretrain_bert(["--recipe", "bert-pretrain-tiny", "--train_size", "48", "--eval_size", "8",
                       "--max_steps", "6", "--logging_steps", "10", "--save_steps", "2", "--progress_bar", "false",
                       "--report_to", "none", "--output_dir", str(out)])
    assert [p.name for p in complete_checkpoints(out / "checkpoints")] == ["step-00000002"]
    assert [r["step"] for r in engine_history(out) if "loss" in r] == [2]


def test_collate_refuses_out_of_range_values_as_the_model_would():
    model = LineageGptForCausalLM(preset("gpt-tiny"))
    limits = value_limits(model)
    vocab, positions = model.config.vocab_size, model.config.max_position_embeddings
    assert limits == {"input_ids": (vocab, "vocab_size"), "decoder_input_ids": (vocab, "vocab_size"),
                      "position_ids": (positions, "max_position_embeddings"), "labels": (vocab, "vocab_size")}
    ids = torch.randint(1, vocab, (2, 5))
    check_batch_values({"input_ids": ids, "labels": ids.masked_fill(ids > vocab // 2, -100)}, limits)
    for key, value, bound in (("input_ids", vocab, vocab), ("input_ids", -1, vocab), ("labels", -5, vocab),
                              ("position_ids", positions, positions)):
        bad = (torch.arange(5).repeat(2, 1) if key == "position_ids" else ids).clone()
        bad[1, 3] = value
        allowed = r"-100 \(ignored\) or in" if key == "labels" else "in"
        with pytest.raises(ValueError, match=rf"`{key}` must be {allowed} \[0, {bound}\).*got {value}"):
            check_batch_values({"input_ids": ids, key: bad}, limits)
    classifier = type("Classifier", (), {"config": model.config, "get_output_embeddings": lambda self: None})()
    assert "labels" not in value_limits(classifier)  # class indices: the classifier's loss checks them


def test_value_checks_off_skips_the_value_reads_and_direct_calls_keep_their_errors():
    model = LineageGptForCausalLM(preset("gpt-tiny")).train()
    ids = torch.randint(1, model.config.vocab_size, (2, 6))
    bad = ids.clone()
    bad[0, 0] = model.config.vocab_size
    with pytest.raises(ValueError, match="`input_ids` must be in"):
        model(input_ids=bad)
    with pytest.raises(ValueError, match="`labels` must be -100"):
        model(input_ids=ids, labels=bad)
    counter = HostReads()
    with counter, value_checks(False):
        model(input_ids=ids, labels=ids)
    assert not [key for key in counter.reads["setup"] if key[0] == os.path.join("modeling", "checks.py")]
    with pytest.raises(ValueError, match="`labels` must be -100"):  # restored on leaving the block
        model(input_ids=ids, labels=bad)


def test_the_lm_label_and_token_checks_read_once_each_per_forward():
    """Outside the engine (a Trainer, a plain loop) the checks run on the device's tensors: one read back each."""
    model = LineageGptForCausalLM(preset("gpt-tiny")).train()
    ids = torch.randint(1, model.config.vocab_size, (2, 6))
    counter = HostReads()
    with counter:
        model(input_ids=ids, labels=ids).loss.backward()
    checks = {name: count for (where, name), count in counter.reads["setup"].items()
              if where == os.path.join("modeling", "checks.py")}
    assert checks == {"check_label_ids": 1, "check_token_ids": 1}
    labels = ids.clone()
    check_label_ids(labels, model.config.vocab_size)
    labels[0, 0] = -7  # changed in place after the check: checked again
    with pytest.raises(ValueError, match="got -7"):
        check_label_ids(labels, model.config.vocab_size)


def test_the_collator_batches_pass_the_checks_of_the_model_they_train():
    model = LineageGptForCausalLM(preset("gpt-tiny"))
    tokenizer = type("Tokenizer", (), {"pad_token_id": 0})()
    batch = CausalLMCollator(tokenizer)([{"input_ids": [5, 6, 7], "position_ids": [0, 1, 0]},
                                         {"input_ids": [8, 9], "position_ids": [0, 1]}])
    check_batch_values(batch, value_limits(model))
    assert not math.isnan(model(**batch).loss.item())


def test_the_engine_refuses_an_out_of_range_token_in_the_collate_before_the_model_runs(tmp_path, monkeypatch):
    """The model's value checks are off inside the loop: the collate's check is what names the bad value (without
    it the embedding would fail with an index error, or on a GPU a device-side assert)."""
    from train.run.recipes import Recipe

    model = LineageGptForCausalLM(preset("gpt-tiny"))
    vocab = model.config.vocab_size
    rows = [{"input_ids": [5, 6, 7, 8]}, {"input_ids": [5, vocab, 7, 8]}]
    forwards = []
    monkeypatch.setattr(Engine, "_compute_loss", lambda self, batch: forwards.append(batch))
    engine = Engine(claim(Recipe(model="gpt-tiny", max_steps=1, per_device_train_batch_size=2, report_to="none",
                                 progress_bar=False, output_dir=str(tmp_path))), model, rows,
                    CausalLMCollator(type("Tokenizer", (), {"pad_token_id": 0})()))
    with pytest.raises(ValueError, match=rf"`input_ids` must be in \[0, {vocab}\) \(vocab_size={vocab}\), got {vocab}"):
        engine.train()
    assert forwards == []
