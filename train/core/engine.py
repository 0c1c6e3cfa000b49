"""The one training engine every entry script runs: a loop over Accelerate.

`Engine(recipe, model, train_dataset, collate_fn, ...)` builds everything and checks every input before the
first step (tokenizer against model, resume checkpoint); `engine.train()` runs the loop; `engine.save_final()`
writes the output folder (`save_pretrained` with code, tokenizer, recipe, model card) and pushes it to the Hub
when the recipe names a repo.

What the loop does (DESIGN.md, Training):

- Accelerate `prepare`, gradient accumulation (`accelerator.accumulate`), clipping, mixed precision
  (`auto`: bf16 or fp16 on a GPU, none on a CPU);
- AdamW with two parameter groups: weight decay on matrices only, never on biases and norms (`ndim < 2`);
- schedules: `linear` warmup then linear decay (BERT), `cosine` warmup then cosine (GPT), `inverse_sqrt`
  (the Transformer paper: `d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`, with the recipe's
  learning rate as a factor), `constant` after warmup;
- periodic evaluation with `gather_for_metrics`; logging of loss, learning rate, gradient norm, tokens/s
  and metrics to `logs/metrics.jsonl` and TensorBoard (Accelerate trackers); a loss-curve PNG at the end;
- checkpoints with `save_state` every `save_steps` and at the end, the last `save_total_limit` kept. A
  checkpoint is written to a temporary folder and renamed into place once complete, so a crash during a
  save never touches the previous good one. `resume_from_checkpoint` (`latest` or a folder) restores
  model, optimizer, scheduler and random states and skips the batches already seen in the epoch.

Exact resume and process-count independence: the data order of epoch `e` is a permutation seeded by
`(seed, e)`, and each example is collated under a torch seed drawn from `(seed, epoch, example index)`, so
random masking never depends on batch composition, prefetching or the number of processes. On a CPU an
interrupted and resumed run reproduces the per-step losses of an uninterrupted one.

A NaN or infinite loss stops the run (`NonFiniteLossError`, with the step number) before the optimizer
applies it; the last good checkpoint stays as it was.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration, set_seed
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm.auto import tqdm

from train.core.recipes import Recipe

STATE_FILE = "lineage_state.json"
CHECKPOINT_PREFIX = "step-"
_PAD_VALUES = {"labels": -100, "attention_mask": 0, "token_type_ids": 0, "decoder_attention_mask": 0,
               "special_tokens_mask": 1, "position_ids": 0}


class CheckpointError(ValueError):
    """A resume path with no checkpoint, or a corrupt one."""


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite."""


class TokenizerMismatchError(ValueError):
    """The tokenizer produces ids the model has no embedding for."""


# ----------------------------------------------------------------------------- checks and building blocks

def check_tokenizer_matches_model(tokenizer, config) -> None:
    """Raise `TokenizerMismatchError` if any id the tokenizer can produce is outside the model's vocabulary."""
    vocab = len(tokenizer)
    if vocab > config.vocab_size:
        raise TokenizerMismatchError(
            f"the tokenizer has {vocab} tokens but the model's vocab_size is {config.vocab_size}: ids "
            f"{config.vocab_size}..{vocab - 1} have no embedding; train the tokenizer with vocab_size <= "
            f"{config.vocab_size} or build the model from the tokenizer")
    outside = {t: i for t, i in zip(tokenizer.all_special_tokens, tokenizer.all_special_ids)
               if i is None or i >= config.vocab_size}
    if outside:
        raise TokenizerMismatchError(f"special token ids outside the model's vocabulary ({config.vocab_size}): {outside}")
    pad = getattr(config, "pad_token_id", None)
    if pad is not None and tokenizer.pad_token_id is not None and pad != tokenizer.pad_token_id:
        raise TokenizerMismatchError(f"the model's pad_token_id is {pad} but the tokenizer pads with "
                                     f"{tokenizer.pad_token!r} = {tokenizer.pad_token_id}")


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on tensors with ndim >= 2 (matrices, embeddings), none on biases and norms."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def schedule_lambda(name: str, warmup: int, total: int, d_model: int | None = None) -> Callable[[int], float]:
    """Multiplier of the base learning rate after `step` optimizer steps (LambdaLR counts from 0)."""
    warmup = max(warmup, 0)
    if name == "inverse_sqrt":
        if d_model is None:
            raise ValueError("the inverse_sqrt schedule needs d_model (the model's hidden_size)")
        w = max(warmup, 1)
        return lambda step: d_model ** -0.5 * min((step + 1) ** -0.5, (step + 1) * w ** -1.5)

    def warm(step: int) -> float | None:
        return (step + 1) / warmup if step < warmup else None

    if name == "linear":
        return lambda s: warm(s) or max(0.0, (total - s) / max(1, total - warmup))
    if name == "cosine":
        return lambda s: warm(s) or 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / max(1, total - warmup))))
    if name == "constant":
        return lambda s: warm(s) or 1.0
    raise ValueError(f"unknown schedule {name!r}")


def resolve_mixed_precision(value: str) -> str:
    if value != "auto":
        return value
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "no"


class EpochSampler(Sampler):
    """A permutation seeded by (seed, epoch); the same on every process, so sharding is deterministic."""

    def __init__(self, size: int, seed: int, shuffle: bool = True):
        self.size, self.seed, self.shuffle, self.epoch = size, seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        if not self.shuffle:
            return iter(range(self.size))
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.size, generator=generator).tolist())


class _Indexed(Dataset):
    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        return index, self.dataset[index]


class SeededCollate:
    """Collate each example under a torch seed drawn from (seed, epoch, index), then pad and stack.

    Random choices a collator makes (MLM masking) then depend on the example alone, not on which other
    examples share its batch, on prefetching, or on the number of processes.
    """

    def __init__(self, collate_fn: Callable, seed: int, pad_token_id: int = 0):
        self.collate_fn, self.seed, self.pad_token_id, self.epoch = collate_fn, seed, pad_token_id, 0

    def _pad_value(self, key: str) -> int:
        return self.pad_token_id if key.endswith("input_ids") else _PAD_VALUES.get(key, 0)

    def __call__(self, items: list[tuple[int, dict]]) -> dict[str, torch.Tensor]:
        parts = []
        for index, example in items:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed((self.seed * 1_000_003 + (self.epoch + 1) * 7_919 + index * 104_729) % 2**62)
                parts.append(self.collate_fn([example]))
        batch = {}
        for key, first in parts[0].items():
            values = [p[key] for p in parts]
            if not isinstance(first, torch.Tensor):
                batch[key] = [v for value in values for v in value]
                continue
            if first.ndim >= 2:
                width = max(v.shape[-1] for v in values)
                values = [torch.nn.functional.pad(v, (0, width - v.shape[-1]), value=self._pad_value(key))
                          for v in values]
            batch[key] = torch.cat(values)
        return batch


@dataclass
class TrainState:
    step: int = 0  # optimizer steps done
    epoch: int = 0
    batch_in_epoch: int = 0  # micro-batches of this epoch already consumed (per process)


# ----------------------------------------------------------------------------- checkpoints

def complete_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints under `root`, oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX)
             and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX):]))


def verify_checkpoint(path: Path) -> dict:
    """The checkpoint's state record, after checking that every file it lists is there with its size."""
    if not path.is_dir():
        raise CheckpointError(f"resume path {path} does not exist")
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise CheckpointError(f"{path} holds no complete checkpoint (no {STATE_FILE}); complete ones are "
                              f"folders {CHECKPOINT_PREFIX}N under <output_dir>/checkpoints")
    try:
        record = json.loads(state_file.read_text())
        files = record["files"]
        TrainState(**record["state"])
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint {path} is corrupt: unreadable {STATE_FILE} ({err})") from err
    for name, size in files.items():
        file = path / name
        if not file.is_file() or file.stat().st_size != size:
            got = file.stat().st_size if file.is_file() else "missing"
            raise CheckpointError(f"checkpoint {path} is corrupt: {name} should have {size} bytes, got {got}")
    return record


# ----------------------------------------------------------------------------- the engine

class Engine:
    """Train `model` on `train_dataset` as `recipe` says.

    Args:
        collate_fn: turns a list of examples into a batch of tensors (`train.core.collators`).
        loss_fn: `(outputs, batch, engine) -> loss`; default `outputs.loss`.
        predict_fn: `(model, batch, outputs) -> {name: tensor [B, ...]}` at evaluation; the tensors are
            gathered across processes (`gather_for_metrics`) and handed to `metrics_fn`.
        metrics_fn: `(predictions: {name: tensor [N, ...]}, eval_loss: float) -> {metric: value}`.
        d_model: width for the inverse-square-root schedule (default `model.config.hidden_size`).
    """

    def __init__(self, recipe: Recipe, model: torch.nn.Module, train_dataset, collate_fn: Callable, *,
                 tokenizer=None, eval_dataset=None, eval_collate_fn: Callable | None = None,
                 loss_fn: Callable | None = None, predict_fn: Callable | None = None,
                 metrics_fn: Callable | None = None, d_model: int | None = None):
        self.recipe, self.tokenizer = recipe, tokenizer
        self.loss_fn, self.predict_fn, self.metrics_fn = loss_fn, predict_fn, metrics_fn
        self.output_dir = Path(recipe.output_dir)
        self.checkpoint_root = self.output_dir / "checkpoints"
        self.log_file = self.output_dir / "logs" / "metrics.jsonl"
        if tokenizer is not None:
            check_tokenizer_matches_model(tokenizer, model.config)
        if len(train_dataset) == 0:
            raise ValueError("the training dataset is empty")
        resume_path = self._resume_path()  # fails before anything is built if the checkpoint is bad

        AcceleratorState._reset_state()
        GradientState._reset_state()
        self.accelerator = acc = Accelerator(
            gradient_accumulation_steps=recipe.gradient_accumulation_steps,
            mixed_precision=resolve_mixed_precision(recipe.mixed_precision),
            log_with="tensorboard" if recipe.report_to == "tensorboard" else None,
            project_config=ProjectConfiguration(project_dir=str(self.output_dir),
                                                logging_dir=str(self.output_dir / "logs")),
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=recipe.ddp_find_unused_parameters)],
            step_scheduler_with_optimizer=False,
        )
        pad_id = getattr(tokenizer, "pad_token_id", None) or getattr(model.config, "pad_token_id", None) or 0
        self.collate = SeededCollate(collate_fn, recipe.seed, pad_id)
        self.sampler = EpochSampler(len(train_dataset), recipe.seed)
        train_dl = DataLoader(_Indexed(train_dataset), batch_size=recipe.per_device_train_batch_size,
                              sampler=self.sampler, collate_fn=self.collate,
                              num_workers=recipe.dataloader_num_workers, generator=_own_generator(recipe.seed))
        self.eval_dl = None
        if eval_dataset is not None and len(eval_dataset) > 0:
            self.eval_collate = SeededCollate(eval_collate_fn or collate_fn, recipe.seed, pad_id)
            self.eval_collate.epoch = -1
            self.eval_dl = DataLoader(_Indexed(eval_dataset), batch_size=recipe.per_device_eval_batch_size,
                                      sampler=EpochSampler(len(eval_dataset), recipe.seed, shuffle=False),
                                      collate_fn=self.eval_collate, generator=_own_generator(recipe.seed))
        self.train_dl = acc.prepare(train_dl)
        if self.eval_dl is not None:
            self.eval_dl = acc.prepare(self.eval_dl)

        self.steps_per_epoch = max(1, math.ceil(len(self.train_dl) / recipe.gradient_accumulation_steps))
        self.total_steps = (recipe.max_steps if recipe.max_steps > 0
                            else max(1, math.ceil(recipe.num_train_epochs * self.steps_per_epoch)))
        optimizer = self._optimizer(model)
        d_model = d_model or getattr(model.config, "d_model", None) or model.config.hidden_size
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, schedule_lambda(recipe.lr_scheduler, recipe.warmup_steps, self.total_steps, d_model))
        self.model, self.optimizer, self.scheduler = acc.prepare(model, optimizer, scheduler)
        self.state = TrainState()
        self.history: list[dict] = []
        if recipe.report_to == "tensorboard":
            acc.init_trackers("tensorboard", config=_scalars(recipe.to_dict()))
        if resume_path is not None:
            self._load_checkpoint(resume_path)
        elif acc.is_main_process:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            self.log_file.write_text("")
        acc.wait_for_everyone()

    # ------------------------------------------------------------------ setup helpers

    def _optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        r = self.recipe
        betas, eps = (r.adam_beta1, r.adam_beta2), r.adam_epsilon
        if r.lr_scheduler == "inverse_sqrt":  # the Transformer paper's Adam
            betas, eps = (0.9, 0.98), 1e-9
        return torch.optim.AdamW(parameter_groups(model, r.weight_decay), lr=r.learning_rate, betas=betas, eps=eps)

    def _resume_path(self) -> Path | None:
        spec = self.recipe.resume_from_checkpoint
        if not spec:
            return None
        if spec == "latest":
            found = complete_checkpoints(self.checkpoint_root)
            if not found:
                raise CheckpointError(f"resume_from_checkpoint=latest, but {self.checkpoint_root} holds no "
                                      f"complete checkpoint")
            path = found[-1]
        else:
            path = Path(spec)
        verify_checkpoint(path)
        return path

    def _load_checkpoint(self, path: Path) -> None:
        record = verify_checkpoint(path)
        try:
            self.accelerator.load_state(str(path))
        except Exception as err:  # a truncated or foreign file; nothing was written anywhere
            raise CheckpointError(f"checkpoint {path} is corrupt: loading it failed ({type(err).__name__}: {err})") from err
        self.state = TrainState(**record["state"])
        self.history = [r for r in _read_jsonl(self.log_file) if r.get("step", 0) <= self.state.step]
        if self.accelerator.is_main_process:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            self.log_file.write_text("".join(json.dumps(r) + "\n" for r in self.history))
        self.accelerator.print(f"resumed from {path} at step {self.state.step} (epoch {self.state.epoch}, "
                               f"batch {self.state.batch_in_epoch})")

    # ------------------------------------------------------------------ the loop

    def reduce_mean(self, value: torch.Tensor) -> torch.Tensor:
        """Mean of a tensor over processes (identity on one process)."""
        return self.accelerator.reduce(value.detach().float().clone(), "mean")

    def _compute_loss(self, batch: dict) -> torch.Tensor:
        outputs = self.model(**batch)
        return self.loss_fn(outputs, batch, self) if self.loss_fn else outputs.loss

    def _check_finite(self, loss: torch.Tensor) -> None:
        bad = self.accelerator.reduce((~torch.isfinite(loss.detach())).float().reshape(1), "sum")
        if bad.item() > 0:
            last = complete_checkpoints(self.checkpoint_root)
            kept = f"the last good checkpoint is {last[-1]}" if last else "no checkpoint was written yet"
            raise NonFiniteLossError(f"loss is {loss.item()} at step {self.state.step + 1}: training stopped "
                                     f"before applying it; {kept}")

    def train(self) -> dict[str, Any]:
        """Run to `total_steps`; return the last training loss, final evaluation metrics and throughput."""
        acc, r, state = self.accelerator, self.recipe, self.state
        bar = tqdm(total=self.total_steps, initial=state.step, desc="train", dynamic_ncols=True,
                   disable=not (acc.is_local_main_process and r.progress_bar))
        step_loss, micro, tokens, t_log, t_start, start_step = 0.0, 0, 0, time.perf_counter(), time.perf_counter(), state.step
        metrics: dict[str, Any] = {}
        self.model.train()
        try:
            while state.step < self.total_steps:
                self.collate.epoch = state.epoch
                loader = (acc.skip_first_batches(self.train_dl, state.batch_in_epoch)
                          if state.batch_in_epoch else self.train_dl)
                loader.set_epoch(state.epoch)  # Accelerate re-seeds the sampler with its iteration count
                for batch in loader:
                    with acc.accumulate(self.model):
                        loss = self._compute_loss(batch)
                        self._check_finite(loss)
                        acc.backward(loss)
                        grad_norm = None
                        if acc.sync_gradients and r.max_grad_norm > 0:
                            grad_norm = acc.clip_grad_norm_(self.model.parameters(), r.max_grad_norm)
                        lr = self.scheduler.get_last_lr()[0]  # the rate this step applies
                        self.optimizer.step()
                        if acc.sync_gradients:
                            self.scheduler.step()
                        self.optimizer.zero_grad(set_to_none=True)
                    state.batch_in_epoch += 1
                    step_loss, micro = step_loss + loss.detach().float(), micro + 1
                    mask = batch.get("attention_mask", batch.get("input_ids"))
                    tokens += int(mask.sum() if "attention_mask" in batch else mask.numel())
                    if not acc.sync_gradients:
                        continue
                    state.step += 1
                    record = {"step": state.step, "epoch": state.epoch,
                              "loss": self.reduce_mean(step_loss / micro).item(),
                              "lr": lr}
                    if grad_norm is not None:
                        record["grad_norm"] = float(grad_norm)
                    step_loss, micro = 0.0, 0
                    if state.step % max(1, r.logging_steps) == 0 or state.step == self.total_steps:
                        now = time.perf_counter()
                        total_tokens = acc.reduce(torch.tensor(float(tokens), device=acc.device), "sum").item()
                        record["tokens_per_s"] = total_tokens / max(now - t_log, 1e-9)
                        tokens, t_log = 0, now
                        bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}")
                    self._log(record)
                    bar.update(1)
                    if r.eval_steps > 0 and state.step % r.eval_steps == 0 and state.step < self.total_steps:
                        metrics = self.evaluate()
                    if r.save_steps > 0 and state.step % r.save_steps == 0 and state.step < self.total_steps:
                        self.save_checkpoint()
                    if state.step >= self.total_steps:
                        break
                else:
                    state.epoch, state.batch_in_epoch = state.epoch + 1, 0
            wall = time.perf_counter() - t_start
            metrics = self.evaluate() if self.eval_dl is not None else metrics
            self.save_checkpoint()
        finally:
            bar.close()
        self.plot_loss_curve()
        train_losses = [h["loss"] for h in self.history if "loss" in h]
        throughput = [h["tokens_per_s"] for h in self.history if "tokens_per_s" in h]
        return {"steps": state.step, "train_loss": train_losses[-1] if train_losses else None,
                "train_seconds": wall, "steps_per_s": (state.step - start_step) / max(wall, 1e-9),
                "tokens_per_s": sum(throughput) / len(throughput) if throughput else None, **metrics}

    def evaluate(self) -> dict[str, Any]:
        """Loss (and `metrics_fn` figures) over the evaluation set, gathered from every process."""
        if self.eval_dl is None:
            return {}
        acc = self.accelerator
        self.model.eval()
        losses, collected = [], {}
        with torch.no_grad():
            for batch in self.eval_dl:
                outputs = self.model(**batch)
                size = next(v for v in batch.values() if isinstance(v, torch.Tensor)).shape[0]
                if getattr(outputs, "loss", None) is not None:
                    losses.append(acc.gather_for_metrics(outputs.loss.detach().float().reshape(1).repeat(size)))
                if self.predict_fn is not None:
                    for key, value in self.predict_fn(acc.unwrap_model(self.model), batch, outputs).items():
                        if value.ndim > 1:
                            value = acc.pad_across_processes(value, dim=1, pad_index=-100)
                        collected.setdefault(key, []).append(acc.gather_for_metrics(value).cpu())
        self.model.train()
        eval_loss = torch.cat(losses).mean().item() if losses else float("nan")
        predictions = {k: _cat_padded(v) for k, v in collected.items()}
        metrics = {"eval_loss": eval_loss}
        if self.metrics_fn is not None:
            metrics.update({f"eval_{k}": v for k, v in self.metrics_fn(predictions, eval_loss).items()})
        self._log({"step": self.state.step, **metrics})
        acc.print(f"step {self.state.step}: " + ", ".join(f"{k}={_short(v)}" for k, v in metrics.items()))
        return metrics

    def _log(self, record: dict) -> None:
        self.history.append(record)
        if self.accelerator.is_main_process:
            with self.log_file.open("a") as f:
                f.write(json.dumps(record) + "\n")
        scalars = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "step"}
        if self.recipe.report_to == "tensorboard":
            self.accelerator.log(scalars, step=record["step"])

    # ------------------------------------------------------------------ checkpoints and outputs

    def save_checkpoint(self) -> Path:
        """`save_state` into a temporary folder, record it, rename it into place, keep the last K."""
        acc, root = self.accelerator, self.checkpoint_root
        final = root / f"{CHECKPOINT_PREFIX}{self.state.step:08d}"
        tmp = root / f".tmp-{final.name}"
        if acc.is_main_process:
            root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
        acc.wait_for_everyone()
        acc.save_state(str(tmp))
        acc.wait_for_everyone()
        if acc.is_main_process:
            files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
            record = {"state": asdict(self.state), "files": files, "time": time.time()}
            with (tmp / STATE_FILE).open("w") as f:
                json.dump(record, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            if final.exists():  # re-saving a step (a resumed run): replace it only once the new one is complete
                old = root / f".old-{final.name}"
                shutil.rmtree(old, ignore_errors=True)
                os.replace(final, old)
                os.replace(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, final)
            for stale in complete_checkpoints(root)[:-max(1, self.recipe.save_total_limit)]:
                shutil.rmtree(stale, ignore_errors=True)
        acc.wait_for_everyone()
        return final

    def plot_loss_curve(self) -> Path | None:
        if not self.accelerator.is_main_process:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        train = [(h["step"], h["loss"]) for h in self.history if "loss" in h]
        evals = [(h["step"], h["eval_loss"]) for h in self.history if "eval_loss" in h]
        fig, ax = plt.subplots(figsize=(6, 4))
        if train:
            ax.plot(*zip(*train), label="train loss", linewidth=1)
        if evals:
            ax.plot(*zip(*evals), "o-", label="eval loss")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("loss")
        ax.set_title(Path(self.recipe.output_dir).name)
        ax.legend()
        ax.grid(alpha=0.3)
        path = self.output_dir / "loss_curve.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path

    def save_final(self, results: dict[str, Any] | None = None, card: dict[str, Any] | None = None,
                   extra_files: dict[str, str] | None = None) -> Path:
        """Write `<output_dir>/model`: weights + code (`save_pretrained`), tokenizer, recipe, model card,
        loss curve; push it to the Hub when the recipe names a repo. Returns the folder."""
        from train.core.model_card import write_model_card

        acc = self.accelerator
        folder = self.output_dir / "model"
        acc.wait_for_everyone()
        state_dict = acc.get_state_dict(self.model)  # every process takes part (FSDP / DeepSpeed gather)
        if acc.is_main_process:
            folder.mkdir(parents=True, exist_ok=True)
            model = acc.unwrap_model(self.model)
            model.save_pretrained(folder, state_dict=state_dict)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(folder)
            self.recipe.save(folder / "recipe.yaml")
            curve = self.output_dir / "loss_curve.png"
            if curve.is_file():
                shutil.copy(curve, folder / "loss_curve.png")
            for name, text in (extra_files or {}).items():
                (folder / name).write_text(text)
            clean = {k: v for k, v in (results or {}).items() if isinstance(v, (int, float, str)) or v is None}
            (folder / "results.json").write_text(json.dumps(clean, indent=1))
            write_model_card(folder, model, self.recipe, clean, **(card or {}))
        acc.wait_for_everyone()
        if self.recipe.push_to_hub and acc.is_main_process:
            from huggingface_hub import HfApi

            api = HfApi()
            try:
                api.create_repo(self.recipe.push_to_hub, exist_ok=True)
                api.upload_folder(repo_id=self.recipe.push_to_hub, folder_path=str(folder))
            except Exception as error:  # offline, no token, no write access: the saved folder stays usable
                raise RuntimeError(
                    f"push_to_hub: uploading to {self.recipe.push_to_hub!r} failed ({error}); "
                    f"the model is saved in {folder}"
                ) from error
        self.accelerator.end_training()
        return folder


def _own_generator(seed: int) -> torch.Generator:
    """A DataLoader draws a base seed each time it starts iterating; from the global generator that would
    shift the dropout stream whenever a loader is re-created (resume, evaluation)."""
    return torch.Generator().manual_seed(seed)


def _cat_padded(tensors: list[torch.Tensor]) -> torch.Tensor:
    if tensors[0].ndim > 1:
        width = max(t.shape[1] for t in tensors)
        tensors = [torch.nn.functional.pad(t, (0, width - t.shape[1]), value=-100) if t.ndim == 2 else t
                   for t in tensors]
    return torch.cat(tensors)


def _scalars(fields: dict) -> dict:
    return {k: v if isinstance(v, (int, float, str, bool)) else json.dumps(v) for k, v in fields.items()}


def _short(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (before building a model, so every process starts from the same weights)."""
    set_seed(seed)


__all__ = ["CheckpointError", "Engine", "EpochSampler", "NonFiniteLossError", "SeededCollate", "TokenizerMismatchError",
           "TrainState", "check_tokenizer_matches_model", "complete_checkpoints", "parameter_groups",
           "resolve_mixed_precision", "schedule_lambda", "seed_everything", "verify_checkpoint"]
