"""The one path of a training run: `run_folder.start_run` (claim the folder, decide the resume, seed: the `Run`), the
`Engine` (the loop over Accelerate), `Engine.finish` (results, model card, samples, the published folder).

    with start_run(recipe) as run:                 # nothing is written into output_dir before this
        tokenizer = get_tokenizer(recipe, ..., run=run)  # kept in the run's folder; then the model, the data
        engine = Engine(run, model, train_data, collate, sparse_prediction=True, token_mean=TokenMean())
        engine.finish(engine.train(), description="...", source=source)

`Engine(...)` builds and checks and writes nothing; `train()` opens the log and runs the loop. Only the training
forward gets the command's options (`training_options`, `TokenMean`): evaluation sees the model as a user does.
docs/training.md ("The engine", "Logging", "Checkpoints and resume").
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import (
    DistributedDataParallelKwargs,
    ProjectConfiguration,
    send_to_device,
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
from train.run import averaging, checkpoints, distributed, flops, publish, run_folder
from train.run.compilation import check_bounded_shapes, compile_model
from train.run.evaluation import evaluate
from train.run.optimization import build_optimizer
from train.run.recipes import Recipe, check_stream, trackers
from train.run.run_folder import Run
from train.run.run_log import RunLog


class NonFiniteLossError(RuntimeError):
    """The loss became NaN or infinite."""


@dataclass
class _Window:
    """What the micro-batches since the last record have accumulated, on the device."""

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


@dataclass(frozen=True)
class TokenMean:
    """A training loss that is a mean over labelled tokens, weighted by this process's share of the tokens across
    processes (`distributed.token_mean`) so that N processes train as one. `term`: the output holding the mean;
    `counted`: the batch entry that marks its tokens, `labels` (those not -100) or `attention_mask` (its ones: GPT's
    auxiliary LM loss, whose labels are the input ids); `first_label`: the first position counted; `weight`: times
    the mean; `plus`: per-sequence terms added unweighted (BERT's `nsp_loss`, GPT's `classification_loss`)."""

    term: str = "loss"
    first_label: int = 0
    plus: tuple[str, ...] = ()
    counted: str = "labels"
    weight: float = 1.0

    def loss(self, accelerator, outputs, batch: dict) -> torch.Tensor:
        marks = batch[self.counted][:, self.first_label:]
        tokens = marks != -100 if self.counted == "labels" else marks.bool()
        loss = self.weight * distributed.token_mean(accelerator, getattr(outputs, self.term), tokens)
        for name in self.plus:
            loss = loss + getattr(outputs, name)
        return loss


def training_options(model: torch.nn.Module, device: torch.device, *, sparse_prediction: bool = False,
                     unpad_inputs: bool = False) -> dict[str, bool]:
    """The keyword options of the training forward: `sparse_prediction` (the output head on labelled positions only)
    and, for a Lineage BERT on a CUDA device, `unpad_inputs`. They change how a step computes, never the model."""
    options = {"sparse_prediction": True} if sparse_prediction else {}
    if unpad_inputs and model.config.model_type == "lineage-bert" and device.type == "cuda":
        options["unpad_inputs"] = True
    return options


class Engine:
    """Train `model` on `train_dataset` as the recipe of `run` (`start_run`) says, into its folder.

    Args:
        train_dataset: a `datasets.Dataset` (or any sequence of examples), or a `datasets.IterableDataset` stream
            (trained by `max_steps`, resumed through its `state_dict()`).
        eval_dataset: a `datasets.Dataset` (or any sequence), not a stream.
        collate_fn: a list of examples -> a padded batch (`train.data.collators`); given `seeds=` when it takes them.
        token_mean: the training loss as a `TokenMean`; None: `outputs.loss`.
        sparse_prediction, unpad_inputs: options of the training forward (`training_options`).
        predict_fn: `(model, batch, outputs) -> {name: tensor [B, ...]}` at evaluation, gathered for `metrics_fn`.
        metrics_fn: `(predictions: {name: tensor [N, ...]}, eval_loss: float) -> {metric: value}`.
    """

    def __init__(self, run: Run, model: torch.nn.Module, train_dataset, collate_fn: Callable, *,
                 tokenizer=None, eval_dataset=None, token_mean: TokenMean | None = None,
                 sparse_prediction: bool = False, unpad_inputs: bool = False,
                 predict_fn: Callable | None = None, metrics_fn: Callable | None = None):
        self.run, self.recipe, self.tokenizer = run, run.recipe, tokenizer
        recipe = run.recipe
        self.token_mean, self.predict_fn, self.metrics_fn = token_mean, predict_fn, metrics_fn
        self.output_dir = run.folder
        self.checkpoint_root = self.output_dir / "checkpoints"
        self.streamed = is_stream(train_dataset)
        position = self._check_inputs(model, tokenizer, train_dataset, eval_dataset)
        self.accelerator = self._accelerator()
        if run.resume_from is not None:
            checkpoints.plan_resume(self.accelerator, run.resume_from)
        self.launch = distributed.describe(self.accelerator)
        self.flops_per_token = flops.flops_per_token(model, recipe.max_seq_length)  # before any sharding
        self.peak_tflops = flops.peak_tflops(self.accelerator.device, self.accelerator.mixed_precision,
                                             recipe.peak_tflops)
        self.options = training_options(model, self.accelerator.device, sparse_prediction=sparse_prediction,
                                        unpad_inputs=unpad_inputs)
        self._build_loaders(train_dataset, eval_dataset, collate_fn, value_limits(model), position)
        self._build_model(model, collate_fn, train_dataset)
        examples = recipe.per_device_train_batch_size * self.accelerator.num_processes
        self.state, self.clock = checkpoints.TrainState(micro_batch_examples=examples), _Clock()
        self.log = RunLog(self.accelerator, self.output_dir, bool(trackers(recipe.report_to)), recipe.to_dict())
        self.opened = False
        if run.resume_from is not None:
            self._resume(run.resume_from)

    # ------------------------------------------------------------------ building

    def _check_inputs(self, model, tokenizer, train_dataset, eval_dataset) -> dict | None:
        """Refuse data that gives no batch and a resume checkpoint that is another run's; returns a stream's position
        in that checkpoint."""
        recipe, resume_from = self.recipe, self.run.resume_from
        _check_datasets(train_dataset, eval_dataset, recipe)
        position = _stream_position(resume_from) if self.streamed and resume_from is not None else None
        examples = "stream" if self.streamed else len(train_dataset)
        self.identity = checkpoints.run_identity(model.config, tokenizer, recipe, examples)
        self.changed = checkpoints.check_resume(resume_from, self.identity) if resume_from is not None else {}
        return position

    def _accelerator(self):
        """The run's Accelerator."""
        r = self.recipe
        return distributed.build_accelerator(
            r.per_device_train_batch_size,
            gradient_accumulation_steps=r.gradient_accumulation_steps,
            max_grad_norm=r.max_grad_norm,
            mixed_precision=distributed.resolve_mixed_precision(r.mixed_precision),
            log_with=trackers(r.report_to) or None,
            project_config=ProjectConfiguration(project_dir=str(self.output_dir),
                                                logging_dir=str(self.output_dir / "logs")),
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=r.ddp_find_unused_parameters)],
            step_scheduler_with_optimizer=False,
        )

    def _open(self) -> None:
        """Begin writing the run, once: say how it runs, start the log and record the launch and the resume."""
        if self.opened:
            return
        self.opened, acc = True, self.accelerator
        changes = "".join(f", {k}: {old} -> {new} (changed on resume)" for k, (old, new) in self.changed.items())
        acc.print("run: " + ", ".join(f"{k}={v}" for k, v in self.launch.items()) + changes)
        if self.stream is not None:
            acc.print(self.stream.describe())
        if self.streamed and stream_resume_problem():  # said now, not when a resume is refused days later
            acc.print(f"note: {stream_resume_problem()}; this run's checkpoints keep its weights")
        self.log.start(self.state.step)
        self.log.record_launch(self.state.step, self.launch, self.changed)
        if self.run.resume_from is not None:
            self.run.note_resume(self.state.step, self.changed)
        self.run.record("logs")
        acc.wait_for_everyone()

    def _build_loaders(self, train_dataset, eval_dataset, collate_fn: Callable, limits: dict,
                       position: dict | None) -> None:
        """The training batches (a stream's begin at `position`, the resume checkpoint's) and the evaluation ones."""
        r = self.recipe
        self.collate = SeededCollate(collate_fn, r.seed, limits)  # checks every batch's values on the CPU
        self.stream = self.train_dl = None
        if self.streamed:
            acc = self.accelerator
            try:
                self.stream = StreamBatches(train_dataset, r.per_device_train_batch_size, self.collate,
                                            acc.process_index, acc.num_processes,
                                            distributed.CpuPeers() if acc.num_processes > 1 else None, position)
            except ValueError as err:  # the position was read in other lanes
                raise checkpoints.CheckpointError(f"checkpoint {self.run.resume_from}: {err}") from None
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

    def _build_model(self, model: torch.nn.Module, collate_fn: Callable, train_dataset) -> None:
        """The model made ready to train (gradient checkpointing; compiled once its batch shapes are checked), its
        optimizer and schedule, prepared by Accelerate."""
        r = self.recipe
        self.steps_per_epoch = (None if self.streamed  # a stream's length is unknown
                                else max(1, math.ceil(len(self.train_dl) / r.gradient_accumulation_steps)))
        self.total_steps = (r.max_steps if r.max_steps > 0
                            else max(1, math.ceil(r.num_train_epochs * self.steps_per_epoch)))
        if r.gradient_checkpointing:
            distributed.enable_gradient_checkpointing(self.accelerator, model)
        if r.compile:  # a stream's first thousand rows stand for it (read only if the check needs rows)
            check_bounded_shapes(r.compile_mode, collate_fn,
                                 train_dataset.take(1000) if self.streamed else train_dataset)
        compile_model(model, r.compile, r.compile_mode, self.accelerator.device.type)  # in place: same keys
        d_model = getattr(model.config, "d_model", None) or model.config.hidden_size
        optimizer, scheduler = build_optimizer(model, r, self.total_steps, d_model)
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, scheduler)
        distributed.mark_sharded_for_generate(self.accelerator, self.model)

    def _resume(self, path: Path) -> None:
        """Restore the checkpoint at `path` (a stream's position in it was restored with the stream)."""
        self.state = checkpoints.load_checkpoint(self.accelerator, path, self.state.micro_batch_examples,
                                                 self.checkpoint_root)
        self.accelerator.print(f"resumed from {path} at step {self.state.step} (epoch {self.state.epoch}, "
                               f"batch {self.state.batch_in_epoch})")

    # ------------------------------------------------------------------ the loop

    def _compute_loss(self, batch: dict) -> torch.Tensor:
        """The training forward (with the command's `training_options`) and its loss."""
        outputs = self.model(**batch, **self.options)
        if self.token_mean is not None:
            return self.token_mean.loss(self.accelerator, outputs, batch)
        return outputs.loss

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
        self._open()
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
            final = "checkpoint averaging"
            averaged = self._average_checkpoints()
            final = "final evaluation"
            metrics = {**(self.evaluate() if self.eval_dl is not None else metrics), **averaged}
        except Exception as error:
            where = f"in the {final} after step {state.step}" if final else f"at step {state.step + 1}"
            distributed.report_failure(self.accelerator, where, error)
            raise
        finally:
            bar.close()
        if self.accelerator.is_main_process:
            publish.plot_loss_curve(self.log.history, self.output_dir / "loss_curve.png", self.output_dir.name,
                                    run_folder.command_line())
            self.run.record("loss_curve.png", "logs")
        return self._summary(start_step, wall, metrics)

    def _average_checkpoints(self) -> dict[str, str]:
        """The model as the mean of the last `average_last_checkpoints` checkpoints (0: as trained), after the final
        one is written: the final evaluation, the samples and the published folder see the average."""
        if not self.recipe.average_last_checkpoints:
            return {}
        self.accelerator.wait_for_everyone()  # the final checkpoint is whole before any process reads it
        names = averaging.average_into(self.accelerator, self.model, self.checkpoint_root,
                                       self.recipe.average_last_checkpoints)
        return {"averaged_checkpoints": ", ".join(names)}

    def _epoch_batches(self):
        """This epoch's batches, skipping those a resumed run already consumed."""
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
        """Forward and backward of one micro-batch, and on the last of an accumulation the optimizer step and any
        record due; returns whether an optimizer step was completed. Only a record reads a device value back."""
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
        evaluation (which must not run on poisoned weights), and at the last step."""
        r = self.recipe
        return (step % r.logging_steps == 0 or step >= self.total_steps
                or any(every > 0 and step % every == 0 for every in (r.save_steps, r.eval_steps)))

    def _read_back(self, window: _Window) -> dict[str, float]:
        """Every value the window holds, reduced over processes in one gather and read back in one transfer."""
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
        """The record of the current step: the window read back, checked, then emptied."""
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
        if self.peak_tflops is not None:  # per device: the tokens are every process's
            record["mfu"] = flops.mfu(record["tokens_per_s"] / self.accelerator.num_processes, self.flops_per_token,
                                      self.peak_tflops)
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
        """results.json's figures: the last training loss, the speed (medians of the records' throughput),
        `metrics`, and the rows left out that a stream counted as it read them, with no read back from the device
        (`Recipe.held_out_copies`, `Recipe.skipped_unlabeled`; in memory: counted before training)."""
        train_losses = self.log.values("loss")
        speed = {key: statistics.median(values) for key in ("tokens_per_s", "mfu") if (values := self.log.values(key))}
        copies = {key: n for key in ("held_out_copies", "skipped_unlabeled")
                  if (count := getattr(self.recipe, key)) is not None and (n := count()) is not None}
        return {"steps": self.state.step, "train_loss": train_losses[-1] if train_losses else None,
                "train_seconds": wall, "steps_per_s": (self.state.step - start_step) / max(wall, 1e-9),
                "tokens_per_s": None, **speed, **self.launch, **copies, **metrics}

    def evaluate(self) -> dict[str, Any]:
        """Loss (and `metrics_fn` figures) over the evaluation set, gathered from every process; logged."""
        if self.eval_dl is None:
            return {}
        self._open()
        began = time.perf_counter()
        metrics = evaluate(self.accelerator, self.model, self.eval_dl, self.predict_fn, self.metrics_fn)
        self.clock.evaluating += time.perf_counter() - began
        self.log.record({"step": self.state.step, "seconds": self.clock.elapsed(), **metrics})
        self.accelerator.print(f"step {self.state.step}: " + ", ".join(f"{k}={_short(v)}" for k, v in metrics.items()))
        return metrics

    # ------------------------------------------------------------------ outputs

    def save_checkpoint(self) -> Path:
        self._open()
        path = checkpoints.save_checkpoint(self.accelerator, self.checkpoint_root, self.state,
                                           self.recipe.save_total_limit, self.launch, self.identity,
                                           self.stream.state_dict() if self.stream is not None else None)
        self.run.record("checkpoints", "logs")
        return path

    def finish(self, results: dict[str, Any], *, description: str = "", source=None,
               samples: list[str | tuple[str, ...]] = (), extra_files: dict[str, str] | None = None) -> Path:
        """Write `results`, the model card and `<output_dir>/model` (`publish.save_run`), release the folder and
        return the published one. `source`: a `train.setup.models.ModelSource`; `samples`: texts or pairs produced."""
        self._open()  # a run finished without training still starts its log first
        if source is not None:
            results.update(source.report)
            description = f"{description.rstrip()} {source.card_text()}".strip()
        for i, sample in enumerate(samples):
            parts = (sample,) if isinstance(sample, str) else sample
            results[f"sample_{i}"] = " -> ".join(parts)
            self.accelerator.print(f"sample: {results[f'sample_{i}']}")
        card = {"description": description, "base_model": getattr(source, "repo_id", None),
                "extra": _samples_section(samples) + self._changes_section()}
        folder = publish.save_run(self.accelerator, self.model, self.recipe, self.tokenizer, results, card, extra_files)
        self.accelerator.end_training()
        self.run.record(*run_folder.RUN_FILES)
        self.run.release()
        distributed.forget_accelerate_state()  # the run is over: the next one in this process starts afresh
        return folder

    def _changes_section(self) -> str:
        """The card's note on the recipe keys a resume changed (the recipe it shows holds the values after it)."""
        if not self.changed:
            return ""
        changes = ", ".join(f"`{k}` {old} -> {new}" for k, (old, new) in self.changed.items())
        return (f"\nResumed from a checkpoint with changed recipe keys (the recipe above holds the values trained "
                f"with after the resume): {changes}.\n")


def _samples_section(samples) -> str:
    """The card's list of samples (an `(input, output)` pair as `'input' -> 'output'`)."""
    if not samples:
        return ""
    lines = [" -> ".join(map(repr, (s,) if isinstance(s, str) else s)) for s in samples]
    return "\n## Samples\n\n" + "\n".join(f"- {line}" for line in lines) + "\n"


def _check_datasets(train_dataset, eval_dataset, recipe: Recipe) -> None:
    """Refuse, before anything is built, training data that gives no batch, a stream the recipe cannot train from
    (`recipes.check_stream`), and evaluation data that is a stream."""
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


__all__ = ["Engine", "NonFiniteLossError", "TokenMean", "training_options"]
