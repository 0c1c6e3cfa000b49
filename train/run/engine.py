"""The one training engine every entry script runs: a loop over Accelerate.

`Engine(recipe, model, train_dataset, collate_fn, ...)` builds everything and checks every input before the
first step (tokenizer against model, resume checkpoint against the recipe: `train.run.checkpoints.check_resume`) and
claims the output folder (`train.run.run_folder`); `engine.train()` runs the loop; `engine.save_final()`
publishes the run (`train.run.publish`: weights with code, tokenizer, recipe, model card, Hub push).

The loop: Accelerate `prepare`, gradient accumulation (`accelerator.accumulate`), clipping,
mixed precision (`auto`: bf16 or fp16 on a GPU, none on a CPU), AdamW and the recipe's schedule
(`train.run.optimization`), periodic evaluation with `gather_for_metrics` (`train.run.evaluation`), a log of
loss, learning rate, gradient norm, tokens/s and metrics (`train.run.run_log`), checkpoints every `save_steps`
and at the end, before the final evaluation, so that a failing evaluation keeps the trained weights
(`train.run.checkpoints`: atomic, the last `save_total_limit` kept). Everything written into the output folder is
recorded in the run's manifest as it is written (`train.run.run_folder.record_written`). `resume_from_checkpoint`
(`latest` or a folder) restores model, optimizer, scheduler and random states and skips the batches already
seen in the epoch (a stream continues from the position the checkpoint saved).

Batches come from `train.data.batching` (a seeded epoch order, one seed per example for the collator's random
choices), so on a CPU an interrupted and resumed run reproduces the per-step losses of an uninterrupted one,
whatever the number of processes. The collator pads; the engine never re-pads. Every batch's token ids, token types,
positions and LM labels are checked against the model's ranges on the CPU as it is collated
(`train.data.collators.check_batch_values`), so the model's own value checks, which would read them back from the
device, are off around the training forward (`modeling.checks.value_checks`).

A `datasets.IterableDataset` as training data (`streaming: true`) is a stream: the run is sized by `max_steps` alone
and reads it in its own order, each process every `W`-th example of it (`batching.StreamBatches`), never ahead of
training (no loader workers, and not Accelerate's dispatch of every batch from the main process: each process reads
the stream itself and collates its share, moved to the device here). When the stream ends before `max_steps` the next
pass is the next epoch; an accumulation window may span two passes (every optimizer step takes
`gradient_accumulation_steps` micro-batches). A checkpoint keeps the position in the stream
(`IterableDataset.state_dict()`, the same on every process), so a resumed run continues with the next micro-batch and
repeats the uninterrupted one's losses. Evaluation data is never a stream: it is read whole at each evaluation.

`max_train_seconds` (> 0) is a wall-clock budget: the run stops after the optimizer step at which the training
time passes it, then checkpoints and evaluates as at `total_steps`. Training time (`seconds` in every step and
evaluation record of the log) is the wall time since `train()` began less the time spent in evaluation, so
periodic evaluation neither uses up the budget nor shifts a loss-against-time curve; it restarts at 0 on resume.

How the run is spread over processes (and the launches refused because this machine cannot honour them) is
`train.run.distributed`'s; the first record of the log and `results.json` say how it ran. A process that raises
says so with its rank before it exits, and the launcher stops the others.

The loop never waits for the device between logging steps: the loss sum, the token count, the gradient norm and
a non-finite-loss flag (the first step whose loss was NaN or infinite) stay on the device, and are reduced over
processes and read back in one transfer (`_read_back`) only when a record is written: every `logging_steps`, at
each checkpoint and evaluation step, and at the last step. A record's `loss` is the mean over the micro-batches
since the previous record; `grad_norm` is that of the record's own step. The `max_train_seconds` budget is checked
in the same read-back, so the run stops within `logging_steps` (or `save_steps` / `eval_steps`) steps of passing it.

A NaN or infinite loss stops the run (`NonFiniteLossError`, naming the first step whose loss was not finite and the
last good checkpoint). It is detected within `logging_steps` steps, always before a checkpoint or an evaluation
(both read the flag first), so no checkpoint is ever written from the weights that the bad step poisoned; the last
good checkpoint stays as it was.
"""


from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import (
    DistributedDataParallelKwargs,
    ProjectConfiguration,
    send_to_device,
    set_seed,
)
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

import modeling  # noqa: F401  (registers the Lineage families with the Auto classes)
from modeling.checks import value_checks
from train.data.batching import (
    EpochSampler,
    IndexedDataset,
    SeededCollate,
    StreamBatches,
    is_stream,
    stream_resume_problem,
)
from train.data.collators import value_limits
from train.data.tokenization import check_tokenizer_matches_model
from train.run import checkpoints, distributed, publish, run_folder
from train.run.compilation import check_bounded_shapes, compile_model
from train.run.evaluation import evaluate
from train.run.optimization import build_optimizer
from train.run.recipes import Recipe, check_stream, trackers
from train.run.run_log import RunLog


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite."""


@dataclass
class _Window:
    """What the micro-batches since the last record have accumulated, on the device (no host read until the next
    record)."""

    loss: float | torch.Tensor = 0.0  # sum of the micro-batch losses
    micro_batches: int = 0
    tokens: int | torch.Tensor = 0
    grad_norm: torch.Tensor | None = None  # the last optimizer step's
    first_bad_step: float | torch.Tensor = math.inf  # the first step with a non-finite loss (inf: none)
    since: float = 0.0  # perf_counter() of the last record


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
        train_dataset: a `datasets.Dataset` (or any sequence of examples), or a stream: a `datasets.IterableDataset`
            (trained by `max_steps`; resumable through its `state_dict()` / `load_state_dict()`, as every
            `datasets` stream is, after `map`, `filter`, `take` and `IterableDataset.from_generator` alike).
        eval_dataset: a `datasets.Dataset` (or any sequence), not a stream.
        collate_fn: turns a list of examples into a padded batch of tensors (`train.data.collators`); called
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
        self.streamed = is_stream(train_dataset)
        _check_datasets(train_dataset, eval_dataset, recipe)
        resume_from = checkpoints.resume_path(recipe.resume_from_checkpoint, self.checkpoint_root)  # fails early
        position = _stream_position(resume_from) if self.streamed and resume_from is not None else None
        examples = "stream" if self.streamed else len(train_dataset)
        self.identity = checkpoints.run_identity(model.config, tokenizer, recipe, examples)
        self.changed = checkpoints.check_resume(resume_from, self.identity) if resume_from is not None else {}
        self.accelerator = self._accelerator()
        if self.accelerator.is_main_process:
            run_folder.claim(recipe)  # before the first file this run writes into output_dir
        self.launch = distributed.describe(self.accelerator)
        changes = "".join(f", {k}: {old} -> {new} (changed on resume)" for k, (old, new) in self.changed.items())
        self.accelerator.print("run: " + ", ".join(f"{k}={v}" for k, v in self.launch.items()) + changes)
        if self.streamed and stream_resume_problem():  # said now, not when a resume is refused days later
            self.accelerator.print(f"note: {stream_resume_problem()}; this run's checkpoints keep its weights")
        self._build_loaders(train_dataset, eval_dataset, collate_fn, value_limits(model))
        self._build_optimization(model, d_model or getattr(model.config, "d_model", None) or model.config.hidden_size)
        examples = recipe.per_device_train_batch_size * self.accelerator.num_processes
        self.state, self.clock = checkpoints.TrainState(micro_batch_examples=examples), _Clock()
        self.log = RunLog(self.accelerator, self.output_dir, bool(trackers(recipe.report_to)), recipe.to_dict())
        if resume_from is not None:
            self._resume(resume_from, position)
        else:
            self.log.restart()
        self.log.record_launch(self.state.step, self.launch, self.changed)
        if self.accelerator.is_main_process:
            if resume_from is not None:
                run_folder.note_resume(recipe, resume_from, self.state.step, self.changed)
            run_folder.record_written(recipe, "logs")
        self.accelerator.wait_for_everyone()

    # ------------------------------------------------------------------ building

    def _accelerator(self):
        r = self.recipe
        AcceleratorState._reset_state()
        GradientState._reset_state()
        return distributed.build_accelerator(
            gradient_accumulation_steps=r.gradient_accumulation_steps,
            mixed_precision=distributed.resolve_mixed_precision(r.mixed_precision),
            log_with=trackers(r.report_to) or None,
            project_config=ProjectConfiguration(project_dir=str(self.output_dir),
                                                logging_dir=str(self.output_dir / "logs")),
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=r.ddp_find_unused_parameters)],
            step_scheduler_with_optimizer=False,
        )

    def _build_loaders(self, train_dataset, eval_dataset, collate_fn: Callable, limits: dict) -> None:
        r = self.recipe
        if r.compile:  # a stream's first thousand rows stand for it (read only if the check needs rows)
            check_bounded_shapes(r.compile_mode, collate_fn,
                                 train_dataset.take(1000) if self.streamed else train_dataset)
        self.collate = SeededCollate(collate_fn, r.seed, limits)  # checks every batch's values on the CPU
        self.stream = self.train_dl = None
        if self.streamed:
            acc = self.accelerator
            self.stream = StreamBatches(train_dataset, r.per_device_train_batch_size, self.collate, acc.process_index,
                                        acc.num_processes)
        else:
            self.train_dl = self.accelerator.prepare(DataLoader(
                IndexedDataset(train_dataset), batch_size=r.per_device_train_batch_size,
                sampler=EpochSampler(len(train_dataset), r.seed), collate_fn=self.collate,
                num_workers=r.dataloader_num_workers, generator=_own_generator(r.seed)))
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
        self.steps_per_epoch = (None if self.streamed  # a stream's length is unknown
                                else max(1, math.ceil(len(self.train_dl) / r.gradient_accumulation_steps)))
        self.total_steps = (r.max_steps if r.max_steps > 0
                            else max(1, math.ceil(r.num_train_epochs * self.steps_per_epoch)))
        if r.gradient_checkpointing:
            distributed.enable_gradient_checkpointing(self.accelerator, model)
        optimizer, scheduler = build_optimizer(model, r, self.total_steps, d_model)
        compile_model(model, r.compile, r.compile_mode, self.accelerator.device.type)  # in place: same keys
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, scheduler)
        distributed.mark_sharded_for_generate(self.accelerator, self.model)

    def _resume(self, path: Path, position: dict | None) -> None:
        """Restore the checkpoint at `path` (and a stream's `position` in it, read before anything was built)."""
        if position is not None:
            self.stream.load_state_dict(position)
        self.state = checkpoints.load_checkpoint(self.accelerator, path, self.state.micro_batch_examples)
        self.log.restart(self.state.step)
        self.accelerator.print(f"resumed from {path} at step {self.state.step} (epoch {self.state.epoch}, "
                               f"batch {self.state.batch_in_epoch})")

    # ------------------------------------------------------------------ the loop

    def _compute_loss(self, batch: dict) -> torch.Tensor:
        outputs = self.model(**batch)
        return self.loss_fn(outputs, batch, self) if self.loss_fn else outputs.loss

    def _track_finite(self, loss: torch.Tensor, window: _Window) -> None:
        """Note on the device the first step whose loss is NaN or infinite (read back with the next record)."""
        bad = ~torch.isfinite(loss.detach())
        window.first_bad_step = torch.where(bad, self.state.step + 1, math.inf).clamp(max=window.first_bad_step)

    def _check_finite(self, first_bad_step: float) -> None:
        """Stop the run if a loss since the last record was not finite: before a checkpoint or evaluation could use
        the weights that step poisoned."""
        if math.isfinite(first_bad_step):
            last = checkpoints.complete_checkpoints(self.checkpoint_root)
            kept = f"the last good checkpoint is {last[-1]}" if last else "no checkpoint was written yet"
            raise NonFiniteLossError(
                f"loss is not finite (NaN or infinite) at step {int(first_bad_step)}: training stopped at step "
                f"{self.state.step} (non-finite losses are detected within logging_steps="
                f"{self.recipe.logging_steps} steps, always before a checkpoint); {kept}")

    def train(self) -> dict[str, Any]:
        """Run to `total_steps`; return the last training loss, final evaluation metrics and throughput."""
        state, start_step, started = self.state, self.state.step, time.perf_counter()
        bar = tqdm(total=self.total_steps, initial=state.step, desc="train", dynamic_ncols=True,
                   disable=not (self.accelerator.is_local_main_process and self.recipe.progress_bar))
        window, metrics, self.clock = _Window(since=started), {}, _Clock(started)
        self.model.train()
        final = None  # the part of the run's end under way, once the last step is done
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
            final = "final checkpoint"  # first: an evaluation that fails cannot lose the trained weights
            self.save_checkpoint()
            final = "final evaluation"
            metrics = self.evaluate() if self.eval_dl is not None else metrics
        except Exception as error:
            where = f"in the {final} after step {state.step}" if final else f"at step {state.step + 1}"
            distributed.report_failure(self.accelerator, where, error)
            raise
        finally:
            bar.close()
        if self.accelerator.is_main_process:
            publish.plot_loss_curve(self.log.history, self.output_dir / "loss_curve.png", self.output_dir.name)
            run_folder.record_written(self.recipe, "loss_curve.png", "logs")
        return self._summary(start_step, wall, metrics)

    def _epoch_batches(self):
        """This epoch's batches, skipping those a resumed run already consumed (a stream continues from the position
        its checkpoint saved)."""
        if self.stream is not None:
            acc = self.accelerator
            batches = self.stream.batches(self.state.epoch, self.state.batch_in_epoch)
            return (send_to_device(batch, acc.device) for batch in batches)
        self.collate.epoch = self.state.epoch
        skip = self.state.batch_in_epoch
        loader = self.accelerator.skip_first_batches(self.train_dl, skip) if skip else self.train_dl
        loader.set_epoch(self.state.epoch)  # Accelerate re-seeds the sampler with its iteration count
        return loader

    def _micro_step(self, batch: dict, window: _Window, bar) -> bool:
        """Forward and backward of one micro-batch; on the last one of an accumulation, the optimizer step and, when
        a record is due (`_records_at`), its log record. Returns whether an optimizer step was completed. Nothing
        here reads a device value back except that record."""
        acc = self.accelerator
        with acc.accumulate(self.model), value_checks(False):  # the collator checked the batch's values on the CPU
            loss = self._compute_loss(batch)
            self._track_finite(loss, window)
            acc.backward(loss)
            if acc.sync_gradients and self.recipe.max_grad_norm > 0:
                window.grad_norm = acc.clip_grad_norm_(self.model.parameters(), self.recipe.max_grad_norm)
            lr = self.scheduler.get_last_lr()[0]  # the rate this step applies
            self.optimizer.step()
            if acc.sync_gradients:
                self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.state.batch_in_epoch += 1
        window.loss, window.micro_batches = window.loss + loss.detach().float(), window.micro_batches + 1
        mask = batch.get("attention_mask", batch.get("input_ids"))
        window.tokens = window.tokens + (mask.sum() if "attention_mask" in batch else mask.numel())
        if not acc.sync_gradients:
            return False
        self.state.step += 1
        if self._records_at(self.state.step):
            self.log.record(self._step_record(window, lr, bar))
        bar.update(1)
        return True

    def _records_at(self, step: int) -> bool:
        """Whether `step` writes a record (and so reads back): every `logging_steps`, at every checkpoint and
        evaluation (which must not run on poisoned weights, and whose windows then match a resumed run's), and at
        the last step."""
        r = self.recipe
        return (step % r.logging_steps == 0 or step >= self.total_steps
                or any(every > 0 and step % every == 0 for every in (r.save_steps, r.eval_steps)))

    def _read_back(self, window: _Window) -> dict[str, float]:
        """Every value the window holds, reduced over processes in one gather and read back in one transfer: the
        mean loss, the token count, the first non-finite step, the last gradient norm and the slowest process's
        training time."""
        acc = self.accelerator
        grad_norm = window.grad_norm if window.grad_norm is not None else math.nan
        if hasattr(grad_norm, "full_tensor"):  # FSDP2 returns the norm as a DTensor over the shards
            grad_norm = grad_norm.full_tensor()
        local = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=acc.device).reshape(()) for v in (
            window.loss / window.micro_batches, window.tokens, window.first_bad_step, grad_norm,
            self.clock.elapsed())])
        every = acc.gather(local[None])  # (processes, 5)
        loss, tokens, first_bad, grad, elapsed = torch.stack([
            every[:, 0].mean(), every[:, 1].sum(), every[:, 2].min(), every[0, 3], every[:, 4].max()]).tolist()
        return {"loss": loss, "tokens": tokens, "first_bad_step": first_bad, "grad_norm": grad, "elapsed": elapsed}

    def _step_record(self, window: _Window, lr: float, bar) -> dict:
        """The record of the current step: the window read back, checked for non-finite losses and the time budget,
        then emptied."""
        step, values, now = self.state.step, self._read_back(window), time.perf_counter()
        self._check_finite(values["first_bad_step"])
        if self.recipe.max_train_seconds > 0 and step < self.total_steps and self._budget_spent(values["elapsed"]):
            self.accelerator.print(f"step {step}: the training budget of {self.recipe.max_train_seconds:g} s is spent")
            self.total_steps = step  # the last step: logged as such, then the final evaluation
        record = {"step": step, "epoch": self.state.epoch, "loss": values["loss"], "lr": lr,
                  "seconds": self.clock.elapsed()}
        if window.grad_norm is not None:
            record["grad_norm"] = values["grad_norm"]
        record["tokens_per_s"] = values["tokens"] / max(now - window.since, 1e-9)
        bar.set_postfix(loss=f"{record['loss']:.4f}", lr=f"{record['lr']:.2e}")
        window.loss, window.micro_batches, window.tokens, window.grad_norm = 0.0, 0, 0, None
        window.since = now
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

    def _budget_spent(self, slowest_elapsed: float) -> bool:
        """Whether the slowest process (its training time read back with the record, so every process stops at the
        same step) has trained for `max_train_seconds`."""
        return slowest_elapsed >= self.recipe.max_train_seconds

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
        path = checkpoints.save_checkpoint(self.accelerator, self.checkpoint_root, self.state,
                                           self.recipe.save_total_limit, self.launch, self.identity,
                                           self.stream.state_dict() if self.stream is not None else None)
        if self.accelerator.is_main_process:
            run_folder.record_written(self.recipe, "checkpoints", "logs")
        return path

    def save_final(self, results: dict[str, Any] | None = None, card: dict[str, Any] | None = None,
                   extra_files: dict[str, str] | None = None) -> Path:
        """Publish the run to `<output_dir>/model` (`train.run.publish.save_run`) and end it; returns the folder."""
        if self.changed:  # the card says what ran: the recipe it shows holds the values after the resume
            card = dict(card or {})
            changes = ", ".join(f"`{k}` {old} -> {new}" for k, (old, new) in self.changed.items())
            card["extra"] = (card.get("extra", "") + f"\nResumed from a checkpoint with changed recipe keys (the "
                             f"recipe above holds the values trained with after the resume): {changes}.\n")
        folder = publish.save_run(self.accelerator, self.model, self.recipe, self.tokenizer, results, card, extra_files)
        self.accelerator.end_training()
        if self.accelerator.is_main_process:
            run_folder.record_written(self.recipe, *run_folder.RUN_FILES)
            run_folder.release(self.recipe)
        return folder


def _check_datasets(train_dataset, eval_dataset, recipe: Recipe) -> None:
    """Refuse, before anything is built, training data that gives no batch, a stream the recipe cannot train from
    (`batching.check_stream`), and evaluation data that is a stream."""
    if is_stream(train_dataset):
        check_stream(recipe.max_steps, recipe.dataloader_num_workers)
    elif not hasattr(train_dataset, "__len__"):
        raise TypeError(f"the training dataset is a {type(train_dataset).__name__}: give a datasets.Dataset (or a "
                        f"sequence of examples) or, for a stream, a datasets.IterableDataset")
    elif len(train_dataset) == 0:
        raise ValueError("the training dataset is empty")
    if is_stream(eval_dataset):
        raise TypeError("the evaluation dataset is a stream (datasets.IterableDataset); evaluation reads its data "
                        "whole at every evaluation: give a datasets.Dataset (a validation split is small: "
                        "datasets.Dataset.from_list(list(stream)))")


def _stream_position(path: Path) -> dict:
    """The stream position saved in the checkpoint at `path`, or a `CheckpointError` when it cannot be resumed."""
    problem = stream_resume_problem()
    if problem:
        raise checkpoints.CheckpointError(f"checkpoint {path} is a streamed run's: {problem}")
    return checkpoints.load_stream_state(path)


def _own_generator(seed: int) -> torch.Generator:
    """A DataLoader draws a base seed each time it starts iterating; from the global generator that would
    shift the dropout stream whenever a loader is re-created (resume, evaluation)."""
    return torch.Generator().manual_seed(seed)


def _short(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (before building a model, so every process starts from the same weights)."""
    set_seed(seed)


@contextmanager
def forward_options(model: torch.nn.Module, **options: Any) -> Iterator[None]:
    """Pass training options to every call of `model` within the block (the engine's training and evaluation steps):
    keyword arguments of the Lineage heads' `forward` (`sparse_prediction`, `unpad_inputs`) that change how a step
    computes, never what the model is, so neither its saved config nor the engine carries them. A keyword the call
    gives itself wins."""
    if not options:
        yield
        return

    def add_options(module, args, kwargs):
        return args, {**options, **kwargs}

    handle = model.register_forward_pre_hook(add_options, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()



def unpadding_on_gpu(model, device: torch.device) -> dict[str, bool]:
    """The forward option that trains a Lineage BERT unpadded (`unpad_inputs=True`, MosaicBERT: no compute on
    padding) on a GPU; none for other families and devices."""
    return {"unpad_inputs": True} if model.config.model_type == "lineage-bert" and device.type == "cuda" else {}


__all__ = ["Engine", "NonFiniteLossError", "forward_options", "seed_everything", "unpadding_on_gpu"]
