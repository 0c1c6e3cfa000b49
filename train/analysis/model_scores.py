"""Scores of the models the harness does not serve, on data the user names (`lineage evaluate` without `--tasks`):

- `score_translator`: a sequence-to-sequence model's beam-search translations of `source` rows scored against their
  `target` as `train_translation` scores them (`train.analysis.translation_scores`: sacreBLEU and chrF with their
  signatures), and BLEU per source-length bucket (`train.analysis.experiment`);
- `pseudo_perplexity`: a masked LM's pseudo-perplexity (Salazar et al. 2020, "Masked Language Model Scoring"): each
  token of a text masked in turn and scored from the rest, exp of the mean negative log-likelihood over every token
  that is not a special token.

docs/evaluation.md ("Translation and BERT-family models").
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tqdm.auto import tqdm

from train.analysis.experiment import bleu_by_bucket, length_buckets, source_lengths, sources_cut, translate
from train.analysis.translation_scores import score_translations


def score_translator(model, tokenizer, rows, *, num_beams: int, length_penalty: float, max_new_tokens: int,
                     batch_size: int, max_source_length: int, beam_search: str = "transformers") -> dict[str, Any]:
    """Scores, signatures, the beam search used, `bleu_by_length` (by each source's length uncut), the sources cut to
    `max_source_length` tokens and the `hypotheses` of `rows` ({source, target})."""
    sources, references = list(rows["source"]), list(rows["target"])
    hypotheses = translate(model, tokenizer, sources, num_beams, max_new_tokens, batch_size=batch_size,
                           length_penalty=length_penalty, beam_search=beam_search, max_length=max_source_length)
    lengths = source_lengths(tokenizer, sources)
    return {**score_translations(hypotheses, references), "num_beams": num_beams, "length_penalty": length_penalty,
            "beam_search": beam_search, "max_new_tokens": max_new_tokens, "sentences": len(sources),
            "max_source_length": max_source_length, "sources_cut": sources_cut(lengths, max_source_length),
            "bleu_by_length": bleu_by_bucket(hypotheses, references, lengths, length_buckets(lengths)),
            "hypotheses": hypotheses}


def _masked_copies(ids: torch.Tensor, positions: list[int], mask_id: int) -> torch.Tensor:
    """(P, T): `ids` once per position, that position replaced by the mask token."""
    copies = ids.repeat(len(positions), 1)
    copies[torch.arange(len(positions)), positions] = mask_id
    return copies


def pseudo_perplexity(model, tokenizer, texts: list[str], *, max_length: int, batch_size: int) -> dict[str, float]:
    """`{pseudo_perplexity, pseudo_log_likelihood, tokens}` of `texts` under a masked LM (module docstring); a progress
    bar counts the texts on a terminal."""
    model.eval()
    total, count, special = 0.0, 0, set(tokenizer.all_special_ids)
    for text in tqdm(texts, desc="pseudo-perplexity", unit="text", disable=None, leave=False):
        encoded = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
        ids = encoded["input_ids"][0]
        positions = [i for i, token in enumerate(ids.tolist()) if token not in special]
        for start in range(0, len(positions), batch_size):
            chunk = positions[start:start + batch_size]
            inputs = {k: v.repeat(len(chunk), 1).to(model.device) for k, v in encoded.items() if k != "input_ids"}
            inputs["input_ids"] = _masked_copies(ids, chunk, tokenizer.mask_token_id).to(model.device)
            with torch.no_grad():
                logits = model(**inputs).logits  # (P, T, V)
            rows = torch.arange(len(chunk))
            log_probs = logits[rows, chunk].float().log_softmax(-1)[rows, ids[chunk].to(model.device)]
            total += log_probs.sum().item()
            count += len(chunk)
    if count == 0:
        raise ValueError("pseudo-perplexity: the texts hold no token that is not a special token")
    return {"pseudo_perplexity": math.exp(-total / count), "pseudo_log_likelihood": total, "tokens": count}


__all__ = ["pseudo_perplexity", "score_translator"]
