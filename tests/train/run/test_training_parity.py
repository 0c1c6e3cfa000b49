"""Training parity: the converted model trained by Lineage's engine and the reference model trained by transformers'
`Trainer`, from the same weights, on the same batches in the same order, with the same AdamW (fused, decay on
matrices and embeddings only), clipping and linear schedule, give the same loss at every step (1e-4, fp32, CPU).

Two differences were found and are pinned here rather than hidden:

- transformers' Trainer (5.23) counts the tokens that normalise a causal-LM loss over `labels[..., 1:]` only when
  the model's `loss_type` maps to `ForCausalLMLoss`; `loss_type` comes from the class name, and `GPT2LMHeadModel`
  (like every `*LMHeadModel`) matches no key of transformers' `LOSS_MAPPING`, so it is None and the Trainer divides
  the loss sum by every label, the never-predicted first token of each row included: its loss (and gradient) is the
  per-token mean times (N - B) / N for N labels in B rows. Setting `model.loss_type = "ForCausalLM"` on the
  reference gives the per-token mean that Lineage trains with (and that GPT-2's own forward returns), and the
  losses match.
- Warmup: Lineage's schedule multiplies the rate by (step + 1) / warmup, so the first step trains at rate / warmup;
  `get_linear_schedule_with_warmup` uses step / warmup, so its first step has rate 0 and its ramp runs one step
  later. The step-by-step comparison runs without warmup; `test_the_warmup_ramps_differ_by_one_step` pins the
  offset.

Dropout is 0: both sides draw dropout masks from the same generator but in a different order of modules and calls,
so with dropout the runs are equally valid samples, not equal numbers; at 0 the comparison isolates the loss,
gradients, optimizer and schedule. The engine's batch order is recorded from its own collator, and the Trainer reads
the same examples sequentially in that order.
"""

import copy

import pytest
import torch
import transformers
from reference_checkpoints import TOKENIZERS, reference_model

from modeling.conversion import from_transformers
from train.run.engine import Engine
from train.run.optimization import schedule_lambda
from train.run.recipes import recipe_from_dict
from train.run.run_folder import claim

STEPS, BATCH, EXAMPLES, LENGTH = 8, 4, 16, 12
HYPER = {"learning_rate": 3e-3, "weight_decay": 0.01, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8,
         "max_grad_norm": 1.0, "warmup_steps": 0, "seed": 7}


def examples(vocab: int, task: str) -> list[dict]:
    """Token rows of different lengths padded to LENGTH (pad id 0), with labels for the task."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for index in range(EXAMPLES):
        length = int(torch.randint(LENGTH // 2, LENGTH + 1, (1,), generator=generator))
        ids = torch.zeros(LENGTH, dtype=torch.long)
        ids[:length] = torch.randint(5, vocab, (length,), generator=generator)
        mask = (torch.arange(LENGTH) < length).long()
        labels = (torch.tensor(index % 2) if task == "classification"
                  else ids.masked_fill(mask == 0, -100))
        rows.append({"index": index, "input_ids": ids, "attention_mask": mask, "labels": labels})
    return rows


def stack(features: list[dict]) -> dict[str, torch.Tensor]:
    return {key: torch.stack([f[key] for f in features]) for key in ("input_ids", "attention_mask", "labels")}


def train_with_engine(model, rows: list[dict], tmp_path) -> tuple[list[float], list[int]]:
    order: list[int] = []

    def collate(features):
        order.extend(f["index"] for f in features)
        return stack(features)

    recipe = recipe_from_dict({**HYPER, "output_dir": str(tmp_path / "engine"), "max_steps": STEPS,
                               "per_device_train_batch_size": BATCH, "lr_scheduler": "linear", "logging_steps": 1,
                               "report_to": "none", "progress_bar": False, "mixed_precision": "no"})
    engine = Engine(claim(recipe), model, rows, collate)
    engine.train()
    return [record["loss"] for record in engine.log.history if "loss" in record], order


class RecordingTrainer(transformers.Trainer):
    """The Trainer, keeping each step's loss unrounded (its log rounds to 4 digits)."""

    losses: list[float]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self.losses.append(loss.detach().item())
        return loss


def train_with_trainer(model, rows: list[dict], tmp_path) -> list[float]:
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"), max_steps=STEPS, per_device_train_batch_size=BATCH,
        learning_rate=HYPER["learning_rate"], weight_decay=HYPER["weight_decay"], adam_beta1=HYPER["adam_beta1"],
        adam_beta2=HYPER["adam_beta2"], adam_epsilon=HYPER["adam_epsilon"], max_grad_norm=HYPER["max_grad_norm"],
        warmup_steps=HYPER["warmup_steps"], lr_scheduler_type="linear", optim="adamw_torch_fused", seed=HYPER["seed"],
        train_sampling_strategy="sequential", logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
        disable_tqdm=True, remove_unused_columns=False)
    trainer = RecordingTrainer(model=model, args=args, train_dataset=rows, data_collator=stack)
    trainer.losses = []
    trainer.train()
    return trainer.losses


@pytest.mark.parametrize("reference_class, task", [("BertForSequenceClassification", "classification"),
                                                   ("GPT2LMHeadModel", "causal-lm")])
def test_engine_and_trainer_give_the_same_losses_step_by_step(tmp_path, reference_class, task):
    tokenizer = TOKENIZERS["Bert" if reference_class.startswith("Bert") else "GPT2"]()
    reference = reference_model(reference_class, tokenizer, dropout=0.0).train()
    converted = from_transformers(copy.deepcopy(reference)).train()
    rows = examples(reference.config.vocab_size, task)
    ours, order = train_with_engine(converted, rows, tmp_path)
    ordered = [rows[i] for i in order]
    if task == "causal-lm":  # the Trainer as GPT-2 comes: every label counted, the loss scaled by (N - B) / N
        as_is = train_with_trainer(copy.deepcopy(reference), ordered, tmp_path)
        labels = stack(ordered[:BATCH])["labels"]
        counted = (labels != -100).sum().item()
        assert as_is[0] == pytest.approx(ours[0] * (counted - BATCH) / counted, abs=1e-5)
        reference.loss_type = "ForCausalLM"
    theirs = train_with_trainer(reference, ordered, tmp_path)
    assert len(ours) == len(theirs) == STEPS
    assert ours[-1] < ours[0]  # it learns: the comparison is not of a frozen model
    print(f"{reference_class}: engine {ours}\ntrainer {theirs}\nmax |difference| "
          f"{max(abs(a - b) for a, b in zip(ours, theirs)):.3g}")
    assert ours == pytest.approx(theirs, abs=1e-4, rel=0)


def test_the_warmup_ramps_differ_by_one_step():
    warmup, total = 4, 10
    ours = schedule_lambda("linear", warmup, total)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    theirs = transformers.get_linear_schedule_with_warmup(optimizer, warmup, total).lr_lambdas[0]
    assert [ours(step) for step in range(warmup)] == [theirs(step + 1) for step in range(warmup)]
    assert theirs(0) == 0.0 and ours(0) == 1 / warmup
    assert [ours(step) for step in range(warmup, total)] == pytest.approx([theirs(s) for s in range(warmup, total)])
