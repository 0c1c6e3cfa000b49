"""The Transformer paper's decoding (section 6.1, as tensor2tensor): log P(Y | X) / ((5 + |Y|) / 6) ** alpha (GNMT's
penalty; transformers' divides by |Y| ** alpha), at most `extra_length` tokens past the source, as
`model.generate(..., num_beams=4, length_penalty=0.6, custom_generate=gnmt_beam_search)`. docs/models.md.
"""

from __future__ import annotations

import math

import torch
from transformers.generation.utils import (
    ALL_CACHE_NAMES,
    GenerateBeamDecoderOnlyOutput,
    GenerateBeamEncoderDecoderOutput,
)


def gnmt_penalty(length: torch.Tensor | int, alpha: float) -> torch.Tensor | float:
    return ((5.0 + length) / 6.0) ** alpha


def _source_lengths(model_kwargs: dict, input_ids: torch.Tensor, batch: int, beams: int) -> torch.Tensor:
    """(batch,) tokens of each source (an encoder-decoder's) or prompt (a decoder's), padding not counted."""
    mask = model_kwargs.get("attention_mask")
    if mask is not None:
        return mask.view(batch, beams, -1)[:, 0].sum(-1)
    encoded = model_kwargs.get("encoder_outputs")
    length = encoded.last_hidden_state.shape[1] if encoded is not None else input_ids.shape[1]
    return torch.full((batch,), length, device=input_ids.device)


def _reorder_cache(model, model_kwargs: dict, beam_idx: torch.Tensor) -> None:
    """Each row of the cache follows the hypothesis it now continues (as transformers' beam search does)."""
    key = next((name for name in ALL_CACHE_NAMES if model_kwargs.get(name) is not None), None)
    if key is None:
        return
    if hasattr(model, "_reorder_cache"):
        model_kwargs[key] = model._reorder_cache(model_kwargs[key], beam_idx)
    else:
        model_kwargs[key].reorder_cache(beam_idx)


def gnmt_beam_search(model, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                     streamer=None, extra_length: int | None = 50, **model_kwargs):
    """The best `num_return_sequences` hypotheses of each example, padded (`sequences_scores`: penalised)."""
    config = generation_config
    if config.do_sample:
        raise ValueError("gnmt_beam_search searches, it does not sample: set do_sample=False")
    if streamer is not None:
        raise ValueError("gnmt_beam_search does not stream: its best hypothesis is known only at the end")
    asked = [name for name in ("output_scores", "output_logits", "output_attentions", "output_hidden_states")
             if getattr(config, name, False)]
    if asked:
        raise ValueError(f"gnmt_beam_search returns sequences and sequences_scores only: leave out {', '.join(asked)}")
    if extra_length is not None and (isinstance(extra_length, bool) or not isinstance(extra_length, int)
                                     or extra_length < 0):
        raise ValueError(f"extra_length must be an integer >= 0 (tokens past the source length) or None, got "
                         f"{extra_length!r}")
    beams, returned, alpha = config.num_beams, config.num_return_sequences or 1, float(config.length_penalty)
    device, prompt = input_ids.device, input_ids.shape[1]
    batch = input_ids.shape[0] // beams
    pad = config._pad_token_tensor
    pad = int(pad) if pad is not None else int(config._eos_token_tensor.view(-1)[0])
    limits = torch.full((batch,), config.max_length - prompt, device=device)
    if extra_length is not None:
        limits = torch.minimum(limits, _source_lengths(model_kwargs, input_ids, batch, beams) + extra_length)
    limits = limits.clamp(min=1)
    width = prompt + int(limits.max())
    alive = input_ids.new_full((batch, beams, width), pad)
    alive[:, :, :prompt] = input_ids.view(batch, beams, prompt)
    alive_scores = torch.zeros(batch, beams, device=device)
    alive_scores[:, 1:] = -math.inf  # the beams start as copies of one hypothesis: one of them grows
    kept = alive.clone()
    kept_scores = torch.full((batch, beams), -math.inf, device=device)
    kept_lengths = torch.zeros(batch, beams, dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    rows = torch.arange(batch, device=device)[:, None]
    steps = 0
    outputs = model._prefill(input_ids, config, model_kwargs)
    while True:
        model_kwargs = model._update_model_kwargs_for_generation(
            outputs, model_kwargs, is_encoder_decoder=model.config.is_encoder_decoder)
        if not (synced_gpus and bool(done.all())):  # a finished process keeps stepping beside the others
            logits = outputs.logits[:, -1, :].to(dtype=torch.float32, device=device)
            del outputs
            log_probs = logits_processor(alive[:, :, :prompt + steps].reshape(batch * beams, -1),
                                         torch.log_softmax(logits, dim=-1))
            vocab = log_probs.shape[-1]
            total = (alive_scores[..., None] + log_probs.view(batch, beams, vocab)).view(batch, -1)
            top, index = total.topk(min(2 * beams, total.shape[1]), dim=1)
            origin, token = index // vocab, index % vocab
            steps += 1
            grown = alive[rows, origin]  # (batch, 2 * beams, width): advanced indexing copies
            grown[:, :, prompt + steps - 1] = token
            ended = stopping_criteria(grown[:, :, :prompt + steps].reshape(-1, prompt + steps), None)
            ended = ended.view(batch, -1) | (steps >= limits)[:, None]
            finished = torch.where(ended & ~done[:, None], top / gnmt_penalty(steps, alpha), -math.inf)
            pool_scores, pick = torch.cat([kept_scores, finished], 1).topk(beams, dim=1)
            kept = torch.cat([kept, grown], 1)[rows, pick]
            kept_lengths = torch.cat([kept_lengths, torch.full_like(finished, steps, dtype=torch.long)], 1)[rows, pick]
            kept_scores = pool_scores
            alive_scores, pick = torch.where(ended, -math.inf, top).topk(beams, dim=1)
            alive = grown[rows, pick]
            _reorder_cache(model, model_kwargs, (rows * beams + origin.gather(1, pick)).view(-1))
            best_penalty = gnmt_penalty(limits if alpha >= 0 else torch.full_like(limits, steps + 1), alpha)
            hopeless = kept_scores[:, 0] >= alive_scores[:, 0] / best_penalty  # more tokens only lower log P
            done |= hopeless | (steps >= limits) | torch.isinf(alive_scores[:, 0])
        if not model._has_unfinished_sequences(bool(done.all()), synced_gpus, device=device):
            break
        model_inputs = model.prepare_inputs_for_generation(
            alive[:, :, :prompt + steps].reshape(batch * beams, -1),
            next_sequence_length=1 if model_kwargs.get("use_cache", True) else None, **model_kwargs)
        outputs = model(**model_inputs, return_dict=True)
    sequences = kept[:, :returned, :prompt + int(kept_lengths[:, :returned].max())].reshape(batch * returned, -1)
    if not config.return_dict_in_generate:
        return sequences
    output = GenerateBeamEncoderDecoderOutput if model.config.is_encoder_decoder else GenerateBeamDecoderOnlyOutput
    return output(sequences=sequences, sequences_scores=kept_scores[:, :returned].reshape(-1))


# a beam search by name (the recipe key `beam_search`, `lineage evaluate --beam_search`) -> its keywords to generate()
BEAM_SEARCHES = {"transformers": {}, "gnmt": {"custom_generate": gnmt_beam_search}}

__all__ = ["BEAM_SEARCHES", "gnmt_beam_search", "gnmt_penalty"]
