"""The optimizer and learning-rate schedules every recipe chooses from.

AdamW with weight decay on matrices and embeddings only (`ndim >= 2`), fused over all tensors (under `inverse_sqrt`
the recipe brings the Transformer paper's beta2 and eps). Schedules (`lr_scheduler`) as multipliers of the learning
rate: `linear` (BERT), `cosine` (GPT), `inverse_sqrt` (`d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`),
`constant`, each after `warmup_steps` (or `warmup_ratio` of the steps). docs/training.md ("Recipes"),
docs/performance.md ("Fused AdamW").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from train.run.recipes import Recipe


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


def build_optimizer(model: torch.nn.Module, recipe: Recipe, total_steps: int,
                    d_model: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over `parameter_groups` and the recipe's schedule over `total_steps` optimizer steps."""
    betas, eps = (recipe.adam_beta1, recipe.adam_beta2), recipe.adam_epsilon
    groups = parameter_groups(model, recipe.weight_decay)
    fused = all(p.is_floating_point() for group in groups for p in group["params"])
    optimizer = torch.optim.AdamW(groups, lr=recipe.learning_rate, betas=betas, eps=eps, fused=fused)
    warmup = (recipe.warmup_steps if recipe.warmup_ratio is None  # a ratio wins over a shipped recipe's steps
              else math.ceil(recipe.warmup_ratio * total_steps))
    schedule = schedule_lambda(recipe.lr_scheduler, warmup, total_steps, d_model)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


__all__ = ["build_optimizer", "parameter_groups", "schedule_lambda"]
