"""Translation scored as the field reports it: corpus sacreBLEU (13a tokenization) and chrF over detokenized text,
each with the sacreBLEU signature that makes the figure comparable (Post, 2018), and the exact-match rate.

Hypotheses and references are whole decoded strings (the tokenizer's own detokenization, special tokens dropped);
sacreBLEU tokenizes them itself, so the figures do not depend on the model's vocabulary. docs/training.md
("Translation scores").
"""

from __future__ import annotations

from train.metrics import load_metric


def score_translations(hypotheses: list[str], references: list[str]) -> dict[str, float | str]:
    """`{bleu, chrf, exact_match, bleu_signature, chrf_signature}` of one reference per hypothesis."""
    streams = [[r] for r in references]
    bleu = load_metric("bleu").compute(predictions=hypotheses, references=streams)
    chrf = load_metric("chrf").compute(predictions=hypotheses, references=streams)
    return {"bleu": bleu["bleu"], "chrf": chrf["chrf"], "exact_match": bleu["exact_match"],
            "bleu_signature": bleu["signature"], "chrf_signature": chrf["signature"]}


__all__ = ["score_translations"]
