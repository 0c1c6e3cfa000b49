"""The output layer of every family's language-model head and its losses: `lm_output` (logits over the real vocabulary
of a padded output layer, and the loss), the LM loss without the (N, V) logits (`lm_head_loss`, in chunks), sparse
prediction and the seq2seq cross-entropy. Dimension legend as in `layers.py`.
"""

from collections.abc import Callable

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from transformers.modeling_utils import slice_logits_to_keep

from .checks import check_label_ids
from .linear import LineageLinear


def labelled_positions(hidden_states: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`sparse_prediction`: the (N, C) states and (N,) labels of the N positions whose label is not -100, in
    row-major order, so an output head and its softmax skip the positions the loss ignores."""
    labelled = labels != -100  # (B, T)
    return hidden_states[labelled], labels[labelled]


def seq2seq_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    label_smoothing: float,
    num_items_in_batch: torch.Tensor | int | None = None,
) -> torch.Tensor:
    """Cross-entropy over target tokens (label-smoothed when `label_smoothing` > 0), ignoring -100; the mean, or the sum
    over `num_items_in_batch`."""
    loss = nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1).to(logits.device), ignore_index=-100,
        label_smoothing=label_smoothing, reduction="mean" if num_items_in_batch is None else "sum",
    )
    if num_items_in_batch is not None:
        loss = loss / torch.as_tensor(num_items_in_batch, device=loss.device)
    return loss


def vocab_logits(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Logits (..., V) of the real vocabulary: a padded output layer's extra columns dropped (a contiguous copy), so
    that nothing downstream sees a padded id and the width matches the tokenizer and the reference models."""
    return logits[..., :vocab_size].contiguous() if logits.shape[-1] != vocab_size else logits


def skips_logits(model: nn.Module, head: nn.Module, labels: torch.Tensor | None, return_logits: bool | None) -> bool:
    """Whether a head computes its loss with `lm_head_loss` and returns `logits=None`. `return_logits` None follows the
    mode, as Liger's integration does: a training forward with `labels` skips the logits, eval mode gets them; True
    always returns them; False skips them in eval mode too and needs `labels`. A wrapped output layer (PEFT, quantised)
    takes the dense path, as does one whose weight ZeRO-3 partitions (`ds_id`) or accelerate offloads (a `meta`
    placeholder): only a call of the layer gathers or loads it."""
    if return_logits is False and labels is None:
        raise ValueError("`return_logits=False` skips the logits to compute the loss without them: it needs `labels`.")
    if labels is None or return_logits or (return_logits is None and not model.training):
        return False
    return type(head) in (nn.Linear, LineageLinear) and not hasattr(head.weight, "ds_id") and not head.weight.is_meta


def sequence_classification_loss(model: nn.Module, labels: torch.Tensor | None,
                                 logits: torch.Tensor) -> torch.Tensor | None:
    """transformers' loss of a sequence classifier (`model.loss_function`: regression when `num_labels` is 1, single-
    or multi-label classification otherwise), with whole-number regression targets (the class 0 of a single-class
    training set, integer scores) in the logits' dtype, as the mean squared error takes them: torch before 2.13 refuses
    int64 targets in its backward ("Found dtype Long but expected Float"). None without labels."""
    if labels is None:
        return None
    if model.config.num_labels == 1 and model.config.problem_type in (None, "regression") and \
            not labels.is_floating_point():
        labels = labels.to(logits.dtype)
    return model.loss_function(labels, logits, model.config)


LM_LOSS_CHUNK_ELEMENTS = 2**25  # float32 logits per chunk of `lm_head_loss` (128 MiB)


def _smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, vocab_size: int,
                            label_smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row losses (n,) and their gradient w.r.t. `logits` (n, V'), which it overwrites. Columns past `vocab_size`
    (padding) are -inf, so they add nothing to the softmax. As `F.cross_entropy`: (1 - eps) * nll + eps * the mean
    over the V real classes of -log p, and 0 (with zero gradient) for rows labelled -100."""
    kept = labels != -100  # (n,)
    target = labels.clamp(min=0)[:, None]  # (n, 1); ignored rows point at class 0, then are zeroed
    lse = torch.logsumexp(logits, dim=-1)  # (n,)
    losses = (1.0 - label_smoothing) * (lse - logits.gather(1, target)[:, 0])
    if label_smoothing:
        losses = losses + label_smoothing * (lse - logits[:, :vocab_size].mean(-1))
    grad = logits.sub_(lse[:, None]).exp_()  # softmax, in place: (n, V')
    grad.scatter_add_(1, target, grad.new_full(target.shape, label_smoothing - 1.0))
    if label_smoothing:
        grad[:, :vocab_size] -= label_smoothing / vocab_size
    return losses * kept, grad.mul_(kept[:, None])


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of `hidden @ weight.T + bias` against `labels`, chunk by chunk over the N tokens: each
    chunk's float32 logits give its losses and logit gradients and are freed, the gradients of `hidden`, `weight`
    (summed in float32) and `bias` computed in the forward (as Liger Kernel does), so neither pass holds (N, V')
    logits. Matmuls in autocast's dtype or that of `hidden`, as the dense head's; the weight cast once a call, and no
    value read back to the host."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor,
                vocab_size: int, label_smoothing: float, chunk_size: int,
                grads: tuple[bool, bool, bool]) -> torch.Tensor:
        """`grads`: which of `hidden`, `weight`, `bias` need a gradient (grad mode is off in here: the caller says)."""
        device = hidden.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else hidden.dtype
        with torch.autocast(device, enabled=False):
            w = weight.to(dtype)
            b = bias.to(dtype) if bias is not None else None
            grad_hidden = torch.empty_like(hidden) if grads[0] else None
            grad_weight = torch.zeros_like(weight, dtype=torch.float32) if grads[1] else None
            grad_bias = torch.zeros_like(bias, dtype=torch.float32) if grads[2] else None
            total = hidden.new_zeros((), dtype=torch.float32)
            for start in range(0, hidden.shape[0], chunk_size):
                rows = slice(start, start + chunk_size)
                h = hidden[rows].to(dtype)  # (n, C)
                logits = nn.functional.linear(h, w, b).float()  # (n, V')
                logits[:, vocab_size:] = float("-inf")
                losses, grad = _smoothed_cross_entropy(logits, labels[rows], vocab_size, label_smoothing)
                total += losses.sum()
                if grad_bias is not None:
                    grad_bias += grad.sum(0)
                grad = grad.to(dtype)  # (n, V'): a no-op in float32
                if grad_hidden is not None:
                    grad_hidden[rows] = grad @ w
                if grad_weight is not None:  # float32 sums of the chunks' products in `dtype`
                    if grad.dtype == grad_weight.dtype:
                        grad_weight.addmm_(grad.T, h)
                    else:
                        grad_weight.add_(grad.T @ h)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (hidden.dtype, weight.dtype, bias.dtype if bias is not None else None)
        return total

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        scaled = [None if grad is None else (grad * grad_output).to(dtype)
                  for grad, dtype in zip(ctx.saved_tensors, ctx.dtypes)]
        return (*scaled, None, None, None, None, None)


def lm_head_loss(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    vocab_size: int,
    label_smoothing: float = 0.0,
    num_items_in_batch: torch.Tensor | int | None = None,
    shift: bool = False,
    chunk_size: int | None = None,
    dense: bool = False,
    check_labels: bool = True,
) -> torch.Tensor:
    """The cross-entropy of the output layer `hidden_states @ weight.T + bias` against `labels`, equal to that of the
    float32 logits (transformers' `ForCausalLMLoss` / `ForMaskedLMLoss`) without holding the (N, V) logits.

    `hidden_states` (..., C), `labels` (...) with -100 left out; `weight` (V', C), `bias` (V',) or None, rows past
    `vocab_size` outside the softmax; `shift`: position t predicts label t + 1; `num_items_in_batch`: divide the sum by
    this count (Trainer's gradient accumulation), else the mean; `chunk_size`: tokens per chunk (by default
    `LM_LOSS_CHUNK_ELEMENTS` logits, docs/performance.md); `dense`: all logits at once (`lm_output` under
    `torch.compile`, where Inductor fuses them with the cross-entropy); `check_labels`: False for a caller that checked
    them."""
    if check_labels:
        check_label_ids(labels, vocab_size)
    if shift:
        labels = nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]  # (..., T): the next token
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])  # (N, C)
    labels = labels.reshape(-1).to(hidden.device)  # (N,)
    if chunk_size is None:
        chunk_size = max(1, LM_LOSS_CHUNK_ELEMENTS // weight.shape[0])
    elif isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"`chunk_size` must be a positive integer (tokens per chunk), got {chunk_size!r}.")
    total = _summed_loss(hidden, weight, bias, labels, vocab_size=vocab_size, label_smoothing=label_smoothing,
                         chunk_size=chunk_size, dense=dense)
    if num_items_in_batch is not None:
        return total / torch.as_tensor(num_items_in_batch, device=total.device)
    count = (labels != -100).sum()
    return torch.where(count > 0, total / count.clamp(min=1), torch.nan)  # no token: NaN with zero gradients, as dense


def _summed_loss(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, labels: torch.Tensor, *,
                 vocab_size: int, label_smoothing: float, chunk_size: int, dense: bool) -> torch.Tensor:
    """The summed loss of (N, C) `hidden` against (N,) `labels`: the dense logits (`dense`), else
    `ChunkedLinearCrossEntropy`."""
    if dense:
        logits = vocab_logits(nn.functional.linear(hidden, weight, bias), vocab_size).float()  # (N, V)
        return nn.functional.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=label_smoothing,
                                           reduction="sum")
    grads = tuple(torch.is_grad_enabled() and x is not None and x.requires_grad for x in (hidden, weight, bias))
    return ChunkedLinearCrossEntropy.apply(hidden, weight, bias, labels, vocab_size, label_smoothing, chunk_size,
                                           grads)


def lm_output(
    model: nn.Module,
    hidden_states: torch.Tensor,
    *,
    labels: torch.Tensor | None,
    output_layer: nn.Module,
    skip_logits: bool,
    transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    logits_bias: torch.Tensor | None = None,
    shift: bool = False,
    sparse_prediction: bool = False,
    logits_to_keep: int | torch.Tensor = 0,
    label_smoothing: float = 0.0,
    shift_labels: torch.Tensor | None = None,
    **loss_kwargs,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The (logits, loss) of every family's LM head over its (B, T, C) `hidden_states`: sliced to the last
    `logits_to_keep` positions, reduced to the labelled ones (`sparse_prediction`), through `transform` into
    `output_layer` (+ `logits_bias`). With `skip_logits` the loss alone (`lm_head_loss`); else the real vocabulary's
    logits and, with labels, `model.loss_function` of them. `shift`: position t predicts label t + 1, unless
    `shift_labels` are given already aligned. Under `torch.compile` the loss without logits takes the dense logits:
    Inductor fuses their float32 cast and the cross-entropy into the model's graph, as for the transformers models
    (docs/performance.md, "GPU figures")."""
    vocab_size = model.config.vocab_size
    if shift_labels is not None:
        labels, shift = shift_labels.contiguous(), False  # `ForCausalLMLoss` views them
    if isinstance(logits_to_keep, torch.Tensor) or logits_to_keep:
        hidden_states = slice_logits_to_keep(hidden_states, logits_to_keep)  # (B, T', C)
    if labels is not None and sparse_prediction:
        hidden_states, labels = labelled_positions(hidden_states, labels)  # (N, C), (N,)
    if transform is not None:
        hidden_states = transform(hidden_states)
    if skip_logits:
        bias = logits_bias[0] if logits_bias is not None else output_layer.bias
        return None, lm_head_loss(hidden_states, output_layer.weight, bias, labels, vocab_size=vocab_size,
                                  label_smoothing=label_smoothing,
                                  num_items_in_batch=loss_kwargs.get("num_items_in_batch"), shift=shift,
                                  dense=torch.compiler.is_compiling(), check_labels=False)
    logits = output_layer(hidden_states)  # (B, T', V') or (N, V')
    logits = vocab_logits(logits + logits_bias if logits_bias is not None else logits, vocab_size)
    if labels is None:
        return logits, None
    if shift_labels is not None:  # aligned already: `model.loss_function` (ForCausalLMLoss) then shifts nothing
        loss_kwargs["shift_labels"] = labels
    return logits, model.loss_function(logits, labels, vocab_size=vocab_size, **loss_kwargs)


__all__ = [
    "ChunkedLinearCrossEntropy",
    "LM_LOSS_CHUNK_ELEMENTS",
    "labelled_positions",
    "lm_head_loss",
    "lm_output",
    "seq2seq_loss",
    "sequence_classification_loss",
    "skips_logits",
    "vocab_logits",
]
