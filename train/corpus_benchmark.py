"""How pretraining scales with the corpus: preparation, time to the first step and memory, at a given corpus size.

    lineage corpus-benchmark --family gpt --size_mb 100 --num_proc 2 --json gpt-100mb.json
    lineage corpus-benchmark --family gpt --size_mb 100 --stages run --repo ../lineage-old   # another checkout

Writes a corpus of `--size_mb` MB of English into `--work` (once per size; `--text_file`: your own documents), trains
one tokenizer on it, then runs each stage as the real command in a new process on empty caches: `prepare` (`lineage
prepare`: seconds, MB/s, the store's size), `run` (pretraining on the prepared corpus: seconds to the first step),
`stream` (the same, `streaming: true`) and `stream_tokenizer` (streamed, training its own tokenizer). Every stage
reports its peak anonymous memory (`Pss_Anon`). docs/performance.md, "Pretraining corpora at scale".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from fnmatch import fnmatch
from itertools import count
from pathlib import Path

from train.cli import CommandParser, number, run_script
from train.data.corpus import generate_records
from train.data.encoders import split_sentences
from train.run import strict_json
from train.run.run_folder import OUTPUT_RECORD, check_writer_file, write_output_json

COMMAND = "corpus-benchmark"
STAGES = ("prepare", "run", "stream", "stream_tokenizer")
WORK_NAMES = ("corpus-*", "tokenizer-*", "cache-*", "run-*", "stage.log", OUTPUT_RECORD)  # what it writes in --work
WORK_RECORD = {"command": COMMAND}
RECIPES = {"gpt": ("gpt-pretrain-tiny", "pretrain_gpt"), "bert": ("bert-pretrain-tiny", "pretrain_bert")}
TOKENIZER_SAMPLE = 20_000_000  # characters the benchmark's tokenizer learns from
OLD_FLAGS = {"--size-mb": "--size_mb", "--unique-mb": "--unique_mb"}  # old spelling -> the flag now


def make_parser() -> argparse.ArgumentParser:
    parser = CommandParser(description=__doc__.strip().splitlines()[0], old_flags=OLD_FLAGS)
    parser.add_argument("--family", choices=tuple(RECIPES), required=True)
    parser.add_argument("--size_mb", type=number(float, 0, "a number of MB", above=True), required=True,
                        help="corpus size in MB (10^6 bytes of UTF-8)")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, in order: {', '.join(STAGES)}")
    parser.add_argument("--num_proc", type=number(int, 1, "a number of processes"), default=os.cpu_count() or 1,
                        help="processes of `lineage prepare`")
    parser.add_argument("--unique_mb", type=number(float, 0, "a number of MB", above=True), default=16.0,
                        help="MB of distinct documents in the corpus")
    parser.add_argument("--text_file", type=Path, default=None,
                        help="distinct documents from this file (one per line) instead of the embedded generator's")
    parser.add_argument("--work", type=Path, default=Path("outputs/corpus-benchmark"),
                        help="where the corpora, tokenizers, caches and runs go")
    parser.add_argument("--repo", type=Path, default=None, help="run the commands from this checkout instead")
    parser.add_argument("--timeout", type=number(float, 0, "a number of seconds", above=True), default=3600,
                        help="seconds a stage may take")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here (a new file)")
    parser.add_switch("--overwrite_json", help="replace the --json file of an earlier corpus-benchmark (nothing else)")
    return parser


class CorpusBenchmarkError(ValueError):
    """A `lineage corpus-benchmark` argument it cannot run with; the message names it."""


def check_repo(repo: Path | None) -> Path:
    """The folder whose code the stages run: `--repo`, refused unless it holds `train` and `modeling`, else this
    code's."""
    if repo is None:
        return Path(__file__).resolve().parents[1]
    if not all((repo / package / "__init__.py").is_file() for package in ("train", "modeling")):
        raise CorpusBenchmarkError(f"--repo {repo}: not a Lineage checkout (no train/__init__.py and "
                                   f"modeling/__init__.py): the stages would run the installed code instead; give the "
                                   f"folder of a checkout")
    return repo.resolve()


def claim_work(work: Path) -> Path:
    """`--work` resolved and marked as this benchmark's, or a `CorpusBenchmarkError` naming what else it holds: a call
    deletes its own caches and runs there and reuses its corpora, so it holds nothing but what `WORK_NAMES` match."""
    folder = work.resolve()
    if folder.exists() and not folder.is_dir():
        raise CorpusBenchmarkError(f"--work {work} is a file; give a folder (it is created when missing)")
    if folder.is_dir() and any(folder.iterdir()):
        mine = (folder / OUTPUT_RECORD).is_file() and json.loads((folder / OUTPUT_RECORD).read_text()) == WORK_RECORD
        others = sorted(p.name for p in folder.iterdir() if not any(fnmatch(p.name, n) for n in WORK_NAMES))
        if not mine or others:
            shown = ", ".join(others or sorted(p.name for p in folder.iterdir()))
            raise CorpusBenchmarkError(f"--work {folder} holds {shown}, which no corpus-benchmark wrote there: it "
                                       f"writes into a new or empty folder, or reuses its own; choose another folder")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / OUTPUT_RECORD).write_text(strict_json.dumps(WORK_RECORD))
    return folder


def _generated_documents() -> Iterator[list[str]]:
    """The embedded generator's documents, each as its sentences."""
    for seed in count():
        for row in generate_records("documents", "train", seed, 2000):
            yield row["sentences"]


def _file_documents(path: Path) -> Iterator[list[str]]:
    """The non-blank lines of `path`, each a document, as its sentences (`split_sentences`)."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield split_sentences(line.strip())


def write_corpus(path: Path, family: str, size_mb: float, unique_mb: float, text_file: Path | None = None) -> Path:
    """`size_mb` MB of documents in `family`'s layout at `path` (kept: a second call reuses it): `unique_mb` MB of
    distinct documents, from `text_file` when given, repeated in a new order per copy."""
    if path.is_file():
        return path
    documents, total = [], 0
    for sentences in _file_documents(text_file) if text_file else _generated_documents():
        text = " ".join(sentences) + "\n" if family == "gpt" else "\n".join(sentences) + "\n\n"
        documents.append(text)
        total += len(text.encode())
        if total >= unique_mb * 1e6:  # the distinct documents asked, not a whole batch of them
            break
    if total < unique_mb * 1e6:
        raise CorpusBenchmarkError(f"--text_file {text_file}: {total / 1e6:.1f} MB of documents, fewer than "
                                   f"--unique_mb {unique_mb:g}; give a smaller --unique_mb")
    staging, rng, written = path.with_name(path.name + ".tmp"), random.Random(0), 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with staging.open("w") as out:
        while written < size_mb * 1e6:
            rng.shuffle(documents)
            for text in documents:
                out.write(text)
                written += len(text.encode())
                if written >= size_mb * 1e6:
                    break
    staging.replace(path)
    return path


def write_tokenizer(folder: Path, corpus: Path, family: str) -> Path:
    """A tokenizer of the recipe's vocabulary size trained on the corpus's first `TOKENIZER_SAMPLE` characters."""
    if (folder / "tokenizer.json").is_file():
        return folder
    from train.data.tokenization import bounded, train_tokenizer
    from train.run.recipes import load_recipe

    recipe = load_recipe(RECIPES[family][0])
    with corpus.open() as lines:
        texts = bounded((line for line in lines if line.strip()), TOKENIZER_SAMPLE)
        tokenizer = train_tokenizer(family, texts, recipe.tokenizer_vocab_size, model_max_length=recipe.max_seq_length)
    tokenizer.save_pretrained(folder)
    return folder


class AnonymousMemory(threading.Thread):
    """The peak anonymous memory (MiB) of a process and its descendants, sampled until `stop()`: the sum of their
    `Pss_Anon`, so pages a forked process still shares with its parent count once."""

    def __init__(self, pid: int, every: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.every, self.peak, self._done = pid, every, 0.0, threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, sum(_pss_anon(p) for p in _tree(self.pid)) / 1024)
            self._done.wait(self.every)

    def stop(self) -> float:
        self._done.set()
        self.join()
        return self.peak


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _pss_anon(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss_Anon:"):
                return int(line.split()[1])  # kB
    except OSError:
        pass
    return 0


def run_stage(command: list[str], env: dict, cwd: Path, timeout: float, first_step: Path | None = None) -> dict:
    """Run `command`; its seconds (to the first record in `first_step` when given, else to its exit) and peak
    anonymous memory. A failing command raises with the end of its output."""
    began = time.perf_counter()
    log = cwd / "stage.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        memory = AnonymousMemory(process.pid)
        memory.start()
        reached = None
        while process.poll() is None and time.perf_counter() - began < timeout:
            if first_step is not None and reached is None and first_step.is_file() and (
                    '"loss"' in first_step.read_text()):
                reached = time.perf_counter() - began
            time.sleep(0.05)
        if process.poll() is None:
            process.kill()
        code = process.wait()
        peak = memory.stop()
    if code != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({code}):\n{log.read_text()[-3000:]}")
    seconds = reached if first_step is not None else time.perf_counter() - began
    if seconds is None:
        raise RuntimeError(f"{' '.join(command)}: no step record in {first_step}")
    return {"seconds": round(seconds, 2), "peak_anon_mib": round(peak, 1)}


def check_arguments(args: argparse.Namespace) -> tuple[list[str], Path, Path | None]:
    """The stages, the folder whose code runs them and the JSON file to write, or a `CorpusBenchmarkError` naming the
    bad argument; writes nothing."""
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        raise CorpusBenchmarkError(f"--stages: unknown stage {unknown[0]!r}; stages: {', '.join(STAGES)}" if unknown
                                   else f"--stages: name at least one of {', '.join(STAGES)}")
    if args.text_file is not None and not args.text_file.is_file():
        raise CorpusBenchmarkError(f"--text_file {args.text_file}: no such file")
    json_file = args.json and check_writer_file(args.json, COMMAND, overwrite=args.overwrite_json)
    return stages, check_repo(args.repo), json_file


def prepared_figures(cache: Path, size_mb: float) -> dict:
    """What the `prepare` stage measured of the store it wrote into `cache`."""
    stores = [p for p in (cache / "lineage" / "prepared").iterdir() if not p.name.startswith(".")]
    info = json.loads((stores[0] / "store.json").read_text())
    size = sum(f.stat().st_size for f in stores[0].iterdir())
    ids = (stores[0] / "tokens.bin").stat().st_size
    return {"tokenize_seconds": info["seconds"], "tokenize_mb_per_s": round(size_mb / info["seconds"], 2),
            "tokens": info["tokens"], "store_mib": round(size / 2**20, 1),
            "bytes_per_token": round(ids / info["tokens"], 3), "index_mib": round((size - ids) / 2**20, 1)}


def stage_keys(stage: str, keys: list[str]) -> list[str]:
    """The recipe keys of a training stage (`run`, `stream`, `stream_tokenizer`)."""
    if stage == "run":
        return keys
    if stage == "stream":
        return [*keys, "--streaming", "true"]
    untokenized = keys[:keys.index("--tokenizer")]
    return [*untokenized, "--streaming", "true", "--tokenizer_train_size", str(TOKENIZER_SAMPLE)]


def main(argv: list[str] | None = None) -> dict:
    args = make_parser().parse_args(argv)
    stages, cwd, json_file = check_arguments(args)
    work = claim_work(args.work)
    recipe, script = RECIPES[args.family]
    source = f"-{args.text_file.stem}" if args.text_file else ""
    name = f"{args.family}{source}-{args.size_mb:g}mb-unique{args.unique_mb:g}mb"
    corpus = write_corpus(work / f"corpus-{name}.txt", args.family, args.size_mb, args.unique_mb, args.text_file)
    tokenizer = write_tokenizer(work / f"tokenizer-{name}", corpus, args.family)
    cache = work / f"cache-{args.family}-{args.size_mb:g}mb"
    env = {**os.environ, "LINEAGE_CACHE": str(cache / "lineage"), "HF_DATASETS_CACHE": str(cache / "datasets"),
           "PYTHONPATH": str(cwd), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "true"}
    keys = ["--recipe", recipe, "--train_file", str(corpus), "--tokenizer", str(tokenizer)]
    run_keys = ["--max_steps", "2", "--logging_steps", "1", "--save_steps", "0", "--report_to", "none",
                "--progress_bar", "false", "--overwrite_output_dir", "true"]
    results = {"family": args.family, "size_mb": args.size_mb, "unique_mb": args.unique_mb, "corpus": str(corpus),
               "text_file": args.text_file and str(args.text_file.resolve()),
               "num_proc": args.num_proc, "repo": str(cwd), "cpus": os.cpu_count()}
    shutil.rmtree(cache, ignore_errors=True)  # cold: the stages after `prepare` find what it wrote
    for stage in stages:
        if stage == "prepare":
            row = run_stage([sys.executable, "-m", "train.prepare", *keys, "--num_proc", str(args.num_proc)], env,
                            work, args.timeout)
            row.update(mb_per_s=round(args.size_mb / row["seconds"], 2), **prepared_figures(cache, args.size_mb))
        else:
            output = work / f"run-{args.family}-{stage}"
            shutil.rmtree(output, ignore_errors=True)
            row = run_stage([sys.executable, "-m", f"train.{script}", *stage_keys(stage, keys), *run_keys,
                             "--output_dir", str(output)], env, work, args.timeout,
                            first_step=output / "logs" / "metrics.jsonl")
        results[stage] = row
        print(f"{args.family} {args.size_mb:g} MB {stage}: " + ", ".join(f"{k} {v}" for k, v in row.items()),
              flush=True)
    if json_file:
        write_output_json(json_file, COMMAND, results)
    return results


if __name__ == "__main__":
    run_script(main)
