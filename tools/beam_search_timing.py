"""The time of `modeling.beam_search.gnmt_beam_search` against transformers' own beam search, as docs/models.md reports
it: one model of each preset (random weights), the same sources and settings, the end token suppressed so that both
run `--steps` decoding steps; the two alternate, the first call of each is left out, and the median of the rest kept.

    python tools/beam_search_timing.py                      # transformer-tiny and transformer-base on this machine
    python tools/beam_search_timing.py --presets transformer-big --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForSeq2SeqLM

from modeling.beam_search import gnmt_beam_search
from train.setup.models import resolve_model


def timed(model, settings: dict, calls: int) -> dict[str, float]:
    """Median seconds of one generate() call of each beam search."""
    arms = {"transformers": {}, "gnmt": {"custom_generate": gnmt_beam_search, "extra_length": None}}
    seconds = {arm: [] for arm in arms}
    for call in range(calls + 1):
        for arm, extra in arms.items():
            if model.device.type == "cuda":
                torch.cuda.synchronize()
            began = time.perf_counter()
            model.generate(**settings, **extra)
            if model.device.type == "cuda":
                torch.cuda.synchronize()
            if call:
                seconds[arm].append(time.perf_counter() - began)
    return {arm: statistics.median(times) for arm, times in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="transformer-tiny,transformer-base")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--source_length", type=int, default=20)
    parser.add_argument("--num_beams", type=int, default=4)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--calls", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    for name in args.presets.split(","):
        torch.manual_seed(0)
        config = resolve_model(name).config
        model = AutoModelForSeq2SeqLM.from_config(config).eval().to(args.device)
        sources = torch.randint(5, config.vocab_size, (args.batch_size, args.source_length), device=args.device)
        settings = {"input_ids": sources, "attention_mask": torch.ones_like(sources), "num_beams": args.num_beams,
                    "max_new_tokens": args.steps, "min_new_tokens": args.steps, "length_penalty": 0.6,
                    "suppress_tokens": [config.eos_token_id]}
        median = timed(model, settings, args.calls)
        print(f"{name}, {args.batch_size} sources of {args.source_length} tokens, {args.num_beams} beams, "
              f"{args.steps} steps on {args.device}: transformers {median['transformers']:.3f} s, gnmt "
              f"{median['gnmt']:.3f} s, gnmt / transformers {median['gnmt'] / median['transformers']:.2f}")


if __name__ == "__main__":
    main()
