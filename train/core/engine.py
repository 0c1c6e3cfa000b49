"""The one training engine every entry script runs: a loop over Accelerate.

`Engine(recipe, model, train_dataset, collate_fn, ...)` builds everything and checks every input before the
first step (tokenizer against model, resume checkpoint); `engine.train()` runs the loop; `engine.save_final()`
publishes the run (`train.core.publish`: weights with code, tokenizer, recipe, model card, Hub push).

The loop: Accelerate `prepare`, gradient accumulation (`accelerator.accumulate`), clipping,
mixed precision (`auto`: bf16 or fp16 on a GPU, none on a CPU), AdamW and the recipe's schedule
(`train.core.optimization`), periodic evaluation with `gather_for_metrics` (`train.core.evaluation`), a log of
loss, learning rate, gradient norm, tokens/s and metrics (`train.core.run_log`), checkpoints every `save_steps`
and at the end (`train.core.checkpoints`: atomic, the last `save_total_limit` kept). `resume_from_checkpoint`
(`latest` or a folder) restores model, optimizer, scheduler and random states and skips the batches already
seen in the epoch.

Batches come from `train.core.batching` (a seeded epoch order, one seed per example for the collator's random
choices), so on a CPU an interrupted and resumed run reproduces the per-step losses of an uninterrupted one,
whatever the number of processes. The collator pads; the engine never re-pads.

`max_train_seconds` (> 0) is a wall-clock budget: the run stops after the optimizer step at which the training
time passes it, then evaluates and checkpoints as at `total_steps`. Training time (`seconds` in every step and
evaluation record of the log) is the wall time since `train()` began less the time spent in evaluation, so
periodic evaluation neither uses up the budget nor shifts a loss-against-time curve; it restarts at 0 on resume.

How the run is spread over processes (and the launches refused because this machine cannot honour them) is
`train.core.distributed`'s; the first record of the log and `results.json` say how it ran. A process that raises
says so with its rank before it exits, and the launcher stops the others.

A NaN or infinite loss stops the run (`NonFiniteLossError`, with the step number) before the optimizer
applies it; the last good checkpoint stays as it was.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration, set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from train.core import checkpoints, distributed, publish
from train.core.batching import EpochSampler, IndexedDataset, SeededCollate
from train.core.compilation import compile_model
from train.core.evaluation import evaluate
from train.core.optimization import build_optimizer
from train.core.recipes import Recipe
from train.core.run_log import RunLog
from train.core.tokenization import check_tokenizer_matches_model


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite."""


@dataclass
class _Window:
    """What the current optimizer step and logging interval have accumulated."""

    loss: float | torch.Tensor = 0.0
    micro_batches: int = 0
    tokens: int = 0
    since: float = 0.0  # perf_counter() of the last throughput record


@dataclass
class _Clock:
    """Training time: seconds since `train()` began, less the seconds spent evaluating."""

    started: float | None = None
    evaluating: float = 0.0

    def elapsed(self) -> float:
        return 0.0 if self.started is None else time.perf_counter() - self.started - self.evaluating


class Engine:
    """Train `model` on `train_dataset` as `recipe` says.

    Args:
        collate_fn: turns a list of examples into a padded batch of tensors (`train.core.collators`); called
            with `seeds=` (one per example) when it takes them.
        loss_fn: `(outputs, batch, engine) -> loss`; default `outputs.loss`.
        predict_fn: `(model, batch, outputs) -> {name: tensor [B, ...]}` at evaluation; the tensors are
            gathered across processes (`gather_for_metrics`) and handed to `metrics_fn`.
        metrics_fn: `(predictions: {name: tensor [N, ...]}, eval_loss: float) -> {metric: value}`.
        d_model: width for the inverse-square-root schedule (default `model.config.hidden_size`).
    """

    def __init__(self, recipe: Recipe, model: torch.nn.Module, train_dataset, collate_fn: Callable, *,
                 tokenizer=None, eval_dataset=None, loss_fn: Callable | None = None,
                 predict_fn: Callable | None = None, metrics_fn: Callable | None = None, d_model: int | None = None):
        self.recipe, self.tokenizer = recipe, tokenizer
        self.loss_fn, self.predict_fn, self.metrics_fn = loss_fn, predict_fn, metrics_fn
        self.output_dir = Path(recipe.output_dir)
        self.checkpoint_root = self.output_dir / "checkpoints"
        if tokenizer is not None:
            check_tokenizer_matches_model(tokenizer, model.config)
        if len(train_dataset) == 0:
            raise ValueError("the training dataset is empty")
        resume_from = checkpoints.resume_path(recipe.resume_from_checkpoint, self.checkpoint_root)  # fails early
        self.accelerator = self._accelerator()
        self.launch = distributed.describe(self.accelerator)
        self.accelerator.print("run: " + ", ".join(f"{k}={v}" for k, v in self.launch.items()))
        self._build_loaders(train_dataset, eval_dataset, collate_fn)
        self._build_optimization(model, d_model or getattr(model.config, "d_model", None) or model.config.hidden_size)
        examples = recipe.per_device_train_batch_size * self.accelerator.num_processes
        self.state, self.clock = checkpoints.TrainState(micro_batch_examples=examples), _Clock()
        self.log = RunLog(self.accelerator, self.output_dir, recipe.report_to == "tensorboard", recipe.to_dict())
        if resume_from is not None:
            self._resume(resume_from)
        else:
            self.log.restart()
        self.log.record_launch(self.state.step, self.launch)
        self.accelerator.wait_for_everyone()

    # ------------------------------------------------------------------ building

    def _accelerator(self):
        r = self.recipe
        AcceleratorState._reset_state()
        GradientState._reset_state()
        return distributed.build_accelerator(
            gradient_accumulation_steps=r.gradient_accumulation_steps,
            mixed_precision=distributed.resolve_mixed_precision(r.mixed_precision),
            log_with="tensorboard" if r.report_to == "tensorboard" else None,
            project_config=ProjectConfiguration(project_dir=str(self.output_dir),
                                                logging_dir=str(self.output_dir / "logs")),
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=r.ddp_find_unused_parameters)],
            step_scheduler_with_optimizer=False,
        )

    def _build_loaders(self, train_dataset, eval_dataset, collate_fn: Callable) -> None:
        r = self.recipe
        self.collate = SeededCollate(collate_fn, r.seed)
        self.sampler = EpochSampler(len(train_dataset), r.seed)
        self.train_dl = self.accelerator.prepare(DataLoader(
            IndexedDataset(train_dataset), batch_size=r.per_device_train_batch_size, sampler=self.sampler,
            collate_fn=self.collate, num_workers=r.dataloader_num_workers, generator=_own_generator(r.seed)))
        self.eval_dl = None
        if eval_dataset is not None and len(eval_dataset) > 0:
            eval_collate = SeededCollate(collate_fn, r.seed)
            eval_collate.epoch = -1
            self.eval_dl = self.accelerator.prepare(DataLoader(
                IndexedDataset(eval_dataset), batch_size=r.per_device_eval_batch_size,
                sampler=EpochSampler(len(eval_dataset), r.seed, shuffle=False), collate_fn=eval_collate,
                generator=_own_generator(r.seed)))

    def _build_optimization(self, model: torch.nn.Module, d_model: int) -> None:
        r = self.recipe
        self.steps_per_epoch = max(1, math.ceil(len(self.train_dl) / r.gradient_accumulation_steps))
        self.total_steps = (r.max_steps if r.max_steps > 0
                            else max(1, math.ceil(r.num_train_epochs * self.steps_per_epoch)))
        if r.gradient_checkpointing:
            distributed.enable_gradient_checkpointing(self.accelerator, model)
        optimizer, scheduler = build_optimizer(model, r, self.total_steps, d_model)
        compile_model(model, r.compile, r.compile_mode, self.accelerator.device.type)  # in place: same keys
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, scheduler)
        distributed.mark_sharded_for_generate(self.accelerator, self.model)

    def _resume(self, path: Path) -> None:
        self.state = checkpoints.load_checkpoint(self.accelerator, path, self.state.micro_batch_examples)
        self.log.restart(self.state.step)
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
            last = checkpoints.complete_checkpoints(self.checkpoint_root)
            kept = f"the last good checkpoint is {last[-1]}" if last else "no checkpoint was written yet"
            raise NonFiniteLossError(f"loss is {loss.item()} at step {self.state.step + 1}: training stopped "
                                     f"before applying it; {kept}")

    def train(self) -> dict[str, Any]:
        """Run to `total_steps`; return the last training loss, final evaluation metrics and throughput."""
        state, start_step, started = self.state, self.state.step, time.perf_counter()
        bar = tqdm(total=self.total_steps, initial=state.step, desc="train", dynamic_ncols=True,
                   disable=not (self.accelerator.is_local_main_process and self.recipe.progress_bar))
        window, metrics, self.clock = _Window(since=started), {}, _Clock(started)
        self.model.train()
        try:
            while state.step < self.total_steps:
                for batch in self._epoch_batches():
                    if self._micro_step(batch, window, bar):
                        metrics = self._after_step() or metrics
                    if state.step >= self.total_steps:
                        break
                else:
                    state.epoch, state.batch_in_epoch = state.epoch + 1, 0
            wall = time.perf_counter() - started
            metrics = self.evaluate() if self.eval_dl is not None else metrics
            self.save_checkpoint()
        except Exception as error:
            distributed.report_failure(self.accelerator, state.step, error)
            raise
        finally:
            bar.close()
        if self.accelerator.is_main_process:
            publish.plot_loss_curve(self.log.history, self.output_dir / "loss_curve.png", self.output_dir.name)
        return self._summary(start_step, wall, metrics)

    def _epoch_batches(self):
        """This epoch's batches, skipping those a resumed run already consumed."""
        self.collate.epoch = self.state.epoch
        skip = self.state.batch_in_epoch
        loader = self.accelerator.skip_first_batches(self.train_dl, skip) if skip else self.train_dl
        loader.set_epoch(self.state.epoch)  # Accelerate re-seeds the sampler with its iteration count
        return loader

    def _micro_step(self, batch: dict, window: _Window, bar) -> bool:
        """Forward and backward of one micro-batch; on the last one of an accumulation, the optimizer step and
        its log record. Returns whether an optimizer step was completed."""
        acc = self.accelerator
        with acc.accumulate(self.model):
            loss = self._compute_loss(batch)
            self._check_finite(loss)
            acc.backward(loss)
            grad_norm = None
            if acc.sync_gradients and self.recipe.max_grad_norm > 0:
                grad_norm = acc.clip_grad_norm_(self.model.parameters(), self.recipe.max_grad_norm)
            lr = self.scheduler.get_last_lr()[0]  # the rate this step applies
            self.optimizer.step()
            if acc.sync_gradients:
                self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.state.batch_in_epoch += 1
        window.loss, window.micro_batches = window.loss + loss.detach().float(), window.micro_batches + 1
        mask = batch.get("attention_mask", batch.get("input_ids"))
        window.tokens += int(mask.sum() if "attention_mask" in batch else mask.numel())
        if not acc.sync_gradients:
            return False
        self.state.step += 1
        if self.recipe.max_train_seconds > 0 and self.state.step < self.total_steps and self._budget_spent():
            acc.print(f"step {self.state.step}: the training budget of {self.recipe.max_train_seconds:g} s is spent")
            self.total_steps = self.state.step  # the last step: logged as such, then the final evaluation
        self.log.record(self._step_record(window, lr, grad_norm, bar))
        bar.update(1)
        return True

    def _step_record(self, window: _Window, lr: float, grad_norm, bar) -> dict:
        step = self.state.step
        record = {"step": step, "epoch": self.state.epoch,
                  "loss": self.reduce_mean(window.loss / window.micro_batches).item(), "lr": lr,
                  "seconds": self.clock.elapsed()}
        if grad_norm is not None:
            record["grad_norm"] = float(grad_norm)
        window.loss, window.micro_batches = 0.0, 0
        if step % max(1, self.recipe.logging_steps) == 0 or step == self.total_steps:
            now, acc = time.perf_counter(), self.accelerator
            tokens = acc.reduce(torch.tensor(float(window.tokens), device=acc.device), "sum").item()
            record["tokens_per_s"] = tokens / max(now - window.since, 1e-9)
            window.tokens, window.since = 0, now
            bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}")
        return record

    def _after_step(self) -> dict[str, Any] | None:
        """Periodic evaluation and checkpoint (the final ones run after the loop); the metrics if evaluated."""
        r, step = self.recipe, self.state.step
        metrics = None
        if r.eval_steps > 0 and step % r.eval_steps == 0 and step < self.total_steps:
            metrics = self.evaluate()
        if r.save_steps > 0 and step % r.save_steps == 0 and step < self.total_steps:
            self.save_checkpoint()
        return metrics

    def _budget_spent(self) -> bool:
        """Whether the slowest process has trained for `max_train_seconds` (every process stops at the same step)."""
        elapsed = torch.tensor([self.clock.elapsed()], device=self.accelerator.device)
        return self.accelerator.gather(elapsed).max().item() >= self.recipe.max_train_seconds

    def _summary(self, start_step: int, wall: float, metrics: dict[str, Any]) -> dict[str, Any]:
        train_losses, throughput = self.log.values("loss"), self.log.values("tokens_per_s")
        return {"steps": self.state.step, "train_loss": train_losses[-1] if train_losses else None,
                "train_seconds": wall, "steps_per_s": (self.state.step - start_step) / max(wall, 1e-9),
                "tokens_per_s": sum(throughput) / len(throughput) if throughput else None, **self.launch, **metrics}

    def evaluate(self) -> dict[str, Any]:
        """Loss (and `metrics_fn` figures) over the evaluation set, gathered from every process; logged."""
        if self.eval_dl is None:
            return {}
        began = time.perf_counter()
        metrics = evaluate(self.accelerator, self.model, self.eval_dl, self.predict_fn, self.metrics_fn)
        self.clock.evaluating += time.perf_counter() - began
        self.log.record({"step": self.state.step, "seconds": self.clock.elapsed(), **metrics})
        self.accelerator.print(f"step {self.state.step}: " + ", ".join(f"{k}={_short(v)}" for k, v in metrics.items()))
        return metrics

    # ------------------------------------------------------------------ outputs

    def save_checkpoint(self) -> Path:
        return checkpoints.save_checkpoint(self.accelerator, self.checkpoint_root, self.state,
                                           self.recipe.save_total_limit, self.launch)

    def save_final(self, results: dict[str, Any] | None = None, card: dict[str, Any] | None = None,
                   extra_files: dict[str, str] | None = None) -> Path:
        """Publish the run to `<output_dir>/model` (`train.core.publish.save_run`) and end it; returns the folder."""
        folder = publish.save_run(self.accelerator, self.model, self.recipe, self.tokenizer, results, card, extra_files)
        self.accelerator.end_training()
        return folder


def _own_generator(seed: int) -> torch.Generator:
    """A DataLoader draws a base seed each time it starts iterating; from the global generator that would
    shift the dropout stream whenever a loader is re-created (resume, evaluation)."""
    return torch.Generator().manual_seed(seed)


def _short(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (before building a model, so every process starts from the same weights)."""
    set_seed(seed)


__all__ = ["Engine", "NonFiniteLossError", "seed_everything"]
