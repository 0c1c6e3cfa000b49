"""One pass over the evaluation set: the mean loss and the figures of a task's `metrics_fn`, with every
process's predictions gathered (`gather_for_metrics` drops the duplicates a sharded last batch adds). The model is
called as a user calls it (no training options), so `predict_fn` reads full outputs. docs/training.md ("The engine").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from accelerate import Accelerator


def evaluate(accelerator: Accelerator, model: torch.nn.Module, loader, predict_fn: Callable | None,
             metrics_fn: Callable | None) -> dict[str, Any]:
    """`{"eval_loss": ..., "eval_<metric>": ...}`; `predict_fn(model, batch, outputs) -> {name: tensor [B, ...]}`
    gives what `metrics_fn(predictions: {name: tensor [N, ...]}, eval_loss) -> {metric: value}` scores."""
    losses, collected = _eval_pass(accelerator, model, loader, predict_fn)
    eval_loss = torch.cat(losses).mean().item() if losses else float("nan")
    metrics = {"eval_loss": eval_loss}
    if metrics_fn is not None:
        metrics.update({f"eval_{k}": v for k, v in metrics_fn(_joined(collected), eval_loss).items()})
    return metrics


def predictions(accelerator: Accelerator, model: torch.nn.Module, loader,
                predict_fn: Callable) -> dict[str, torch.Tensor]:
    """`predict_fn`'s outputs for every example of `loader`, in its order (data without labels: no loss)."""
    return _joined(_eval_pass(accelerator, model, loader, predict_fn)[1])


def _eval_pass(accelerator: Accelerator, model: torch.nn.Module, loader,
               predict_fn: Callable | None) -> tuple[list[torch.Tensor], dict[str, list[torch.Tensor]]]:
    """Per-example losses and `predict_fn` outputs of every batch, gathered from all processes."""
    model.eval()
    losses, collected = [], {}
    with torch.no_grad():
        for batch in loader:
            outputs = model(**batch)
            size = next(v for v in batch.values() if isinstance(v, torch.Tensor)).shape[0]
            if getattr(outputs, "loss", None) is not None:
                losses.append(accelerator.gather_for_metrics(outputs.loss.detach().float().reshape(1).repeat(size)))
            if predict_fn is not None:
                for key, value in predict_fn(accelerator.unwrap_model(model), batch, outputs).items():
                    if value.ndim > 1:
                        value = accelerator.pad_across_processes(value, dim=1, pad_index=-100)
                    collected.setdefault(key, []).append(accelerator.gather_for_metrics(value).cpu())
    model.train()
    return losses, collected


def _joined(collected: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {k: _cat_padded(v) for k, v in collected.items()}


def _cat_padded(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate batches of (B, L) predictions padded with -100 to the widest L."""
    if tensors[0].ndim > 1:
        width = max(t.shape[1] for t in tensors)
        tensors = [torch.nn.functional.pad(t, (0, width - t.shape[1]), value=-100) if t.ndim == 2 else t
                   for t in tensors]
    return torch.cat(tensors)


__all__ = ["evaluate", "predictions"]
