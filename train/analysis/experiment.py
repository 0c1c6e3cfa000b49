"""The lineage experiment's measurements and report: BLEU by source length, alignments, plots, `report.md`.

`train.lineage_experiment` hands each trained arm to `translate` (beam search), `bleu_by_bucket` (sacreBLEU per
source-length bucket, edges at quantiles: the curve on which a fixed-size thought vector loses long sentences and
attention does not), `alignment` (the last decoder layer's cross-attention, mean over heads, the reference forced)
and `write_report`. docs/experiments.md.
"""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from modeling.beam_search import BEAM_SEARCHES
from train.analysis.attention import collect, labels, target_ids
from train.analysis.attention_plots import display_tokens, draw_matrix
from train.metrics import load_metric
from train.run import strict_json
from train.run.figures import pyplot, save_figure


def translate(model, tokenizer, sources: list[str], num_beams: int, max_new_tokens: int,
              batch_size: int = 100, length_penalty: float = 1.0, beam_search: str = "transformers",
              max_length: int | None = None) -> list[str]:
    """Beam-search translations of `sources`, in order (`beam_search`: a name of `BEAM_SEARCHES`), each cut to its
    first `max_length` tokens where given, as a run cuts its sources; a progress bar counts the sentences on a
    terminal."""
    hypotheses = []
    model.eval()
    with tqdm(total=len(sources), desc="translate", unit="sentence", disable=None, leave=False) as bar:
        for start in range(0, len(sources), batch_size):
            batch = sources[start:start + batch_size]
            encoded = tokenizer(batch, return_tensors="pt", padding=True, truncation=max_length is not None,
                                max_length=max_length).to(model.device)
            with torch.no_grad():
                out = model.generate(**encoded, num_beams=num_beams, max_new_tokens=max_new_tokens,
                                     length_penalty=length_penalty, **BEAM_SEARCHES[beam_search])  # (B, T)
            hypotheses += [t.strip() for t in tokenizer.batch_decode(out, skip_special_tokens=True)]
            bar.update(len(batch))
    return hypotheses


def source_lengths(tokenizer, sources: list[str]) -> list[int]:
    """Tokens of each source (end token included), before any cut."""
    return [len(ids) for ids in tokenizer(sources, verbose=False)["input_ids"]]


def sources_cut(lengths: list[int], max_length: int) -> int:
    """How many of the sources of `lengths` (`source_lengths`) `translate` cuts to `max_length` tokens."""
    return sum(n > max_length for n in lengths)


def cut_note(where: str, cut: int, sentences: int, max_length: int, why: str) -> str:
    """The line a command prints when `translate` cut `cut` of its `sentences` sources (`why`: whence `max_length`)."""
    return f"{where}: cut {cut} of {sentences} sources to their first {max_length} tokens ({why})"


def length_buckets(lengths: list[int], count: int = 4) -> list[tuple[int, int]]:
    """Up to `count` inclusive (low, high) token ranges covering `lengths`, cut at its quantiles."""
    cuts = sorted({math.ceil(np.quantile(lengths, q / count)) for q in range(1, count)})
    edges = [min(lengths) - 1] + [c for c in cuts if min(lengths) <= c < max(lengths)] + [max(lengths)]
    return [(low + 1, high) for low, high in pairwise(edges)]


def bucket_label(bucket: tuple[int, int]) -> str:
    return str(bucket[0]) if bucket[0] == bucket[1] else f"{bucket[0]}-{bucket[1]}"


def bleu(hypotheses: list[str], references: list[str]) -> float:
    return float(load_metric("bleu").compute(predictions=hypotheses, references=[[r] for r in references])["bleu"])


def bleu_by_bucket(hypotheses: list[str], references: list[str], lengths: list[int],
                   buckets: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """`[{bucket, sentences, bleu}]`: corpus BLEU of the sentences whose source length lies in each bucket."""
    rows = []
    for bucket in buckets:
        chosen = [i for i, n in enumerate(lengths) if bucket[0] <= n <= bucket[1]]
        score = bleu([hypotheses[i] for i in chosen], [references[i] for i in chosen]) if chosen else None
        rows.append({"bucket": bucket_label(bucket), "sentences": len(chosen), "bleu": score})
    return rows


def alignment(model, tokenizer, source: str, target: str,
              max_length: int) -> tuple[np.ndarray, list[str], list[str]] | None:
    """(R, K) cross-attention of the last decoder layer, mean over heads, with the target tokens' labels (rows) and
    the source tokens' (columns; the source cut to its first `max_length` tokens, as `translate` cuts it); None for a
    model without attention."""
    if getattr(model.config, "attention", "") == "none":
        return None
    if getattr(model.config, "_attn_implementation", "eager") != "eager":
        model.set_attn_implementation("eager")  # only eager returns the weights
    model.eval()
    inputs = dict(tokenizer(source, return_tensors="pt", truncation=True, max_length=max_length))
    decoder_ids, _ = target_ids(model, tokenizer, inputs, target, num_beams=1, max_new_tokens=None)
    cross = next(m for m in collect(model, inputs, decoder_ids) if m.name == "cross")
    axes = labels(tokenizer, inputs, decoder_ids)
    return cross.weights[-1].mean(axis=0), axes["target"], axes["source"]


def draw_alignment(found: tuple[np.ndarray, list[str], list[str]], arm: str, path: Path, source: str) -> Path:
    matrix, rows, columns = found
    draw_matrix(matrix, display_tokens(rows), display_tokens(columns), f"{arm}: cross-attention (target x source)",
                path, source)
    return path


def plot_loss_vs_time(arms: dict[str, dict], path: Path, source: str) -> Path:
    """Validation loss of every arm against its training time (seconds, evaluation excluded)."""
    figure, ax = pyplot().subplots(figsize=(7, 4.5))
    for name, arm in arms.items():
        points = arm["eval_curve"]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], "o-", markersize=3, label=name)
    ax.set_xlabel("training time (s, evaluation excluded)")
    ax.set_ylabel("validation loss")
    ax.set_title("Validation loss against wall-clock training time")
    ax.grid(alpha=0.3)
    ax.legend()
    figure.tight_layout()
    return save_figure(figure, path, source)


def plot_bleu_vs_length(arms: dict[str, dict], path: Path, source: str | None = None) -> Path:
    """BLEU of every arm per source-length bucket."""
    figure, ax = pyplot().subplots(figsize=(7, 4.5))
    for name, arm in arms.items():
        rows = arm["bleu_by_length"]
        ax.plot([r["bucket"] for r in rows], [r["bleu"] if r["bleu"] is not None else np.nan for r in rows], "o-",
                label=name)
    ax.set_xlabel("source length (tokens)")
    ax.set_ylabel("BLEU")
    ax.set_title("BLEU against source length")
    ax.grid(alpha=0.3)
    ax.legend()
    figure.tight_layout()
    return save_figure(figure, path, source)


def _number(value, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def results_table(arms: dict[str, dict]) -> str:
    """The Markdown table: one row per arm."""
    buckets = [r["bucket"] for r in next(iter(arms.values()))["bleu_by_length"]]
    head = (["arm"] + [f"BLEU {b} tok" for b in buckets]
            + ["BLEU", "tokens/s", "parameters", "training s", "wall s", "steps"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, arm in arms.items():
        cells = ([name] + [_number(r["bleu"]) for r in arm["bleu_by_length"]]
                 + [_number(arm["bleu"]), _number(arm["tokens_per_s"], 0), f"{arm['parameters']:,}",
                    _number(arm["training_seconds"]), _number(arm["wall_seconds"]), str(arm["steps"])])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report_text(arms: dict[str, dict], meta: dict[str, Any]) -> str:
    sentences = ", ".join(f"{r['bucket']}: {r['sentences']}" for r in next(iter(arms.values()))["bleu_by_length"])
    pictures = "\n".join(f"- {name}: ![{name}]({arm['heatmap']})" for name, arm in arms.items() if arm["heatmap"])
    budget = (f"{meta['max_steps']} optimizer steps per arm (no time limit: the same command gives the same losses "
              "and BLEU)" if meta["max_steps"] else f"{meta['budget_seconds']:g} s of training time per arm "
                                                     "(evaluation excluded)")
    return f"""# Lineage experiment: from the thought vector to attention to the Transformer

Command: `{meta['command']}`

Data: {meta['data']} ({meta['train_rows']} training pairs, {meta['eval_rows']} validation pairs); one BPE
tokenizer ({meta['vocab_size']} tokens) trained once on the training pairs and shared by every arm. Budget:
{budget}; machine: {meta['machine']}.

BLEU: sacreBLEU of beam-search translations (beams: {meta['num_beams']}) of the validation set after training,
overall and per source-length bucket (tokens uncut; sentences per bucket: {sentences}), each source cut to its
first {meta['max_source_length']} tokens as training cut it ({meta['sources_cut']} cut). "training s" is the time the
budget counts (periodic evaluation excluded), "wall s" the whole arm (building, training, evaluation,
translation, saving); tokens/s counts source tokens of the training batches.

{results_table(arms)}

![validation loss against training time](loss_vs_time.png)

![BLEU against source length](bleu_vs_length.png)

## Alignments

The same validation sentence through every attention arm, the reference target forced through the decoder
(rows: target tokens produced, columns: source tokens; mean over the last decoder layer's heads; the RNN
without attention has none to draw):
`{meta['sentence']['source']}` -> `{meta['sentence']['target']}`.

{pictures}

Trained models: `runs/<arm>/model` (open them with `python -m train.attention_maps --model runs/<arm>/model`);
per-arm logs: `runs/<arm>/logs/metrics.jsonl` (`seconds`: the training time of each record).
"""


def write_report(folder: Path, arms: dict[str, dict], meta: dict[str, Any]) -> dict[str, Path]:
    """`results.json`, both plots and `report.md` in `folder`; returns their paths."""
    paths = {"results": folder / "results.json", "loss_vs_time": folder / "loss_vs_time.png",
             "bleu_vs_length": folder / "bleu_vs_length.png", "report": folder / "report.md"}
    paths["results"].write_text(strict_json.dumps({"meta": meta, "arms": arms}, indent=2, ensure_ascii=False))
    plot_loss_vs_time(arms, paths["loss_vs_time"], meta["command"])
    plot_bleu_vs_length(arms, paths["bleu_vs_length"], meta["command"])
    paths["report"].write_text(report_text(arms, meta))
    return paths


__all__ = ["alignment", "bleu", "bleu_by_bucket", "bucket_label", "cut_note", "draw_alignment", "length_buckets",
           "plot_bleu_vs_length", "plot_loss_vs_time", "report_text", "results_table", "source_lengths", "sources_cut",
           "translate", "write_report"]
