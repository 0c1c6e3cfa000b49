"""The main job: the seed papers' story at small scale, on the embedded corpus, on a CPU.

    python -m train.main_job                 # the full run (recipes main-*)
    python -m train.main_job --quick         # a smoke run of the same steps (used by the tests)
    python -m train.main_job --output_dir DIR [--overwrite_output_dir true]   # true: replace an earlier job in DIR

Trains the three tokenizers, pretrains and fine-tunes BERT and GPT, trains a Transformer and an RNN translator and
draws the Transformer's cross-attention, each stage a command's `main`; ends with `summary.json` / `summary.md`, the
figures reached and the folders written (`train.run.run_folder.output_in_place`). docs/training.md ("Commands").
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
import transformers

import modeling
from train import (
    attention_maps,
    finetune,
    pretrain_bert,
    pretrain_gpt,
    train_translation,
)
from train.cli import run_script
from train.data.corpus import generate_records, tokenizer_training_texts
from train.data.tokenization import train_tokenizer
from train.run import run_folder, strict_json

COMMAND = "main_job"
TOKENIZERS = {"bert": 2000, "gpt": 2000, "seq2seq": 1000}


class Stage(NamedTuple):
    name: str  # its folder under the job's output_dir, and its row of the table
    script: Callable  # the command's main
    recipe: str
    tokenizer: str | None  # the family of the job's tokenizer it trains with; None: its starting folder's
    parent: str | None  # the stage whose model it starts from
    figures: tuple[str, ...]  # the results it reports


STAGES = [
    Stage("bert-pretrain", pretrain_bert.main, "main-bert-pretrain", "bert", None,
          ("eval_mlm_accuracy", "eval_nsp_accuracy")),
    Stage("bert-nli", finetune.main, "main-bert-nli", None, "bert-pretrain", ("eval_accuracy", "eval_f1")),
    Stage("gpt-pretrain", pretrain_gpt.main, "main-gpt-pretrain", "gpt", None, ("eval_perplexity", "sample_0")),
    Stage("gpt-nli", finetune.main, "main-gpt-nli", None, "gpt-pretrain", ("eval_accuracy", "eval_f1")),
    Stage("translation", train_translation.main, "main-translation", "seq2seq", None,
          ("eval_bleu", "eval_exact_match", "sample_0")),
    Stage("rnn-translation", train_translation.main, "main-rnn-translation", "seq2seq", None,
          ("eval_bleu", "eval_exact_match", "sample_0")),
]
QUICK_RUN = ["--max_steps", "8", "--train_size", "120", "--eval_size", "24", "--save_steps", "0", "--logging_steps",
             "4", "--warmup_steps", "2"]
# the quick model of a stage that builds one (a fine-tuning stage keeps its pretrained architecture)
QUICK_MODEL = ["--model_overrides", "{hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2, "
                                    "intermediate_size: 64, max_position_embeddings: 128}"]
# the quick model of a stage whose family has other config fields than those QUICK_MODEL sets
QUICK_MODELS = {"rnn-translation": "{hidden_size: 32, embedding_size: 16, num_encoder_layers: 1, "
                                   "num_decoder_layers: 1, attention: bahdanau}"}


def train_tokenizers(folder: Path, quick: bool) -> dict[str, Path]:
    texts = tokenizer_training_texts(size=300 if quick else 2000)
    out = {}
    for family, vocab in TOKENIZERS.items():
        out[family] = folder / family
        train_tokenizer(family, texts, 600 if quick else vocab, model_max_length=128).save_pretrained(out[family])
    return out


def check_loads(folder: Path) -> str:
    """Load the folder through the Auto class its model is registered under, as a user would; return the class
    loaded."""
    architecture = transformers.AutoConfig.from_pretrained(str(folder)).architectures[0]
    auto_class = getattr(transformers, getattr(modeling, architecture).auto_class_name())
    model = auto_class.from_pretrained(str(folder), trust_remote_code=True)
    transformers.AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True)
    return type(model).__name__


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.2f}"
    text = str(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def render_table(rows: list[dict]) -> str:
    lines = ["| step | figure | value | wall s (CPU s) | folder (loads as) |", "|---|---|---|---|---|"]
    for row in rows:
        for i, (figure, value) in enumerate(row["figures"].items()):
            timing = f"{row['seconds']:.0f} ({row['cpu_seconds']:.0f})"
            lead = ((f"| {row['name']} ", f"| {timing} | {row['folder']} ({row['loads_as']}) |") if i == 0
                    else ("| ", "| | |"))
            lines.append(f"{lead[0]}| {figure} | {_format(value)} {lead[1]}")
    return "\n".join(lines)


def attention_map_row(root: Path, translator: str) -> dict:
    """The translator's cross-attention (head mean, last layer) for one validation sentence, as a table row
    whose folder column is the PNG."""
    sentence = generate_records("translation", "validation", size=1)[0]["source"]
    t0, cpu0 = time.perf_counter(), time.process_time()
    files = attention_maps.main(["--model", str(root / translator / "model"), "--text", sentence,
                                 "--output_dir", str(root / translator / "attention")])
    png = [p for p in files["png"] if p.name.startswith("cross_") and p.name.endswith("_mean.png")][-1]
    return {"name": "attention-map", "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - cpu0,
            "folder": str(png), "loads_as": "PNG", "figures": {f"{translator} cross-attention": sentence}}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of every step (about a minute)")
    parser.add_argument("--output_dir", default="outputs/main-job")
    parser.add_argument("--progress_bar", default="true", choices=["true", "false"])
    parser.add_argument("--overwrite_output_dir", default="false", choices=["true", "false"],
                        help="replace an earlier main job's folder DIR (nothing else)")
    args = parser.parse_args(argv)
    folder = run_folder.check_writer_output(args.output_dir, COMMAND, overwrite=args.overwrite_output_dir == "true")
    with run_folder.output_in_place(folder, COMMAND):
        return run_job(args)


def run_job(args: argparse.Namespace) -> list[dict]:
    """The job's stages and summary into `args.output_dir` (owned by `main`)."""
    root = Path(args.output_dir)
    start, cpu_start = time.perf_counter(), time.process_time()
    tokenizers = train_tokenizers(root / "tokenizers", args.quick)
    print(f"tokenizers trained in {time.perf_counter() - start:.1f}s: {', '.join(map(str, tokenizers.values()))}")
    rows = []
    for stage in STAGES:
        name = stage.name
        argv_stage = ["--recipe", stage.recipe, "--output_dir", str(root / name), "--progress_bar", args.progress_bar]
        argv_stage += (["--tokenizer", str(tokenizers[stage.tokenizer])] if stage.tokenizer
                       else ["--model", str(root / stage.parent / "model")])
        if args.quick:
            argv_stage += QUICK_RUN + (QUICK_MODEL if stage.tokenizer else [])
            argv_stage += ["--model_overrides", QUICK_MODELS[name]] if name in QUICK_MODELS else []
        t0, cpu0 = time.perf_counter(), time.process_time()
        results, folder = stage.script(argv_stage)
        seconds = time.perf_counter() - t0
        rows.append({"name": name, "seconds": seconds, "cpu_seconds": time.process_time() - cpu0,
                     "folder": str(folder), "loads_as": check_loads(folder),
                     "figures": {k.removeprefix("eval_"): results[k] for k in stage.figures if k in results},
                     "results": {k: v for k, v in results.items() if isinstance(v, (int, float, str))}})
        print(f"== {name}: {seconds:.0f}s, " + ", ".join(f"{k}={_format(v)}" for k, v in rows[-1]["figures"].items()))
    attention = attention_map_row(root, "translation")
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    table = render_table(rows + [attention])
    summary = (f"# Lineage main job\n\nWall time: {wall:.0f}s; CPU time of this process: {cpu:.0f}s "
               f"({torch.get_num_threads()} torch threads)\n\n{table}\n")
    (root / "summary.md").write_text(summary)
    (root / "summary.json").write_text(strict_json.dumps({"wall_seconds": wall, "cpu_seconds": cpu, "quick": args.quick,
                                                   "stages": rows, "attention_map": attention["folder"]}, indent=1))
    print("\n" + summary)
    bleu = {row["name"]: _format(row["figures"].get("bleu")) for row in rows}
    print(f"BLEU on held-out sentences: Transformer {bleu['translation']}, RNN + attention {bleu['rnn-translation']}")
    return rows


if __name__ == "__main__":
    run_script(main)
