"""The GPU proof (issue 37): every GPU path of Lineage run once, each part timed and bounded, into one report.

    lineage gpu-check --output_dir gpu-check                        # on one CUDA GPU: the whole plan, ~630 s
    lineage gpu-check --output_dir gpu-check --dry_run true         # the same plan on the CPU at tiny sizes (CI)
    lineage gpu-check --output_dir gpu-check --parts env,benchmark --budget_seconds 300

The plan is `STAGES` of `PARTS` of steps, each `python -m ...` in its own process group; the parts of a stage run
side by side (they check), those that time run alone, and a part's lanes of steps side by side. A stage gets its share
of `--budget_seconds`, a step its estimate's share of what its lane has left, or up to SLACK x its estimate; one past
its time is killed (timed out), those left when its part's time is spent are not run. Writes `report.json` and
`report.md` into `--output_dir` (`train.run.run_folder.output_in_place`). docs/performance.md ("GPU figures").
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from train.cli import CommandParser, number, run_script
from train.run import run_folder, strict_json
from train.run.checkpoints import complete_checkpoints
from train.run.environment import device, installed, versions

COMMAND = "gpu-check"
ROOT = Path(__file__).resolve().parents[1]  # the code the steps run (and, in a checkout, its tests)
PACKAGES = ("peft", "deepspeed", "flash-attn", "evaluate", "safetensors", "huggingface-hub", "pytest")  # + versions()
TAIL = 3000  # characters of a step's output kept in the report


class Step(NamedTuple):
    name: str  # its row in the report, and its folder under its part's
    argv: tuple[str, ...]  # what follows `python -m`
    weight: float = 10.0  # its estimated seconds on one GPU: its share of the time its lane has left
    figures: Callable[[Path, str], dict] | None = None  # (its folder, its output) -> what it measured
    kill_at_checkpoint: bool = False  # SIGKILL it once its run's folder holds a complete checkpoint
    lane: str = ""  # the steps of a part's lanes run side by side, those of one lane in turn


class Part(NamedTuple):
    name: str
    steps: Callable[[Path, bool, float], list[Step]]  # (its folder, dry run, its seconds) -> its steps
    dry_run: str  # how the dry run shrinks or skips it


# ----------------------------------------------------------------------------- what the steps measured

def _records(run: Path) -> list[dict]:
    log = run / "logs" / "metrics.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []


RUN_FIGURES = ("steps", "train_loss", "tokens_per_s", "mfu")  # results.json's (the medians: `Engine._summary`)


def run_figures(run: Path, output: str = "") -> dict:
    """A training run's steps, last loss, median tokens/s and MFU (where it has them) and its evaluation, as its
    `results.json` holds them."""
    results = run / "model" / "results.json"
    figures = json.loads(results.read_text()) if results.is_file() else {}
    return {k: v for k, v in figures.items()
            if (k in RUN_FIGURES or k.startswith("eval_")) and isinstance(v, (int, float))}


def curve_figures(run: Path, output: str = "") -> dict:
    """`run_figures` and the loss curve, (step, loss) at every logging step."""
    return {**run_figures(run), "loss_curve": [[r["step"], round(r["loss"], 4)] for r in _records(run) if "loss" in r]}


def prepared_figures(run: Path, output: str) -> dict:
    """`run_figures`, and a problem when the run did not open the prepared store."""
    reused = "prepared corpus reused" in output
    return {**run_figures(run), "prepared_store_reused": reused,
            **({} if reused else {"problem": "the run did not open the store `prepare` wrote"})}


def resumed_figures(run: Path, output: str) -> dict:
    """`run_figures`, and a problem unless the run's record names a resume and its log runs past the checkpoint."""
    record = json.loads((run / run_folder.RECORD).read_text()) if (run / run_folder.RECORD).is_file() else {}
    figures = {**run_figures(run), "resumes": len(record.get("resumes", []))}
    if not figures["resumes"]:
        figures["problem"] = f"{run / run_folder.RECORD} records no resume"
    return figures


def pytest_figures(folder: Path, output: str) -> dict:
    """The counts of pytest's last line (passed, failed, skipped, errors, tests collected) and the tests that failed
    (read from its verbose lines, so a run killed halfway still names them)."""
    counts = re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|tests? collected|xfailed|xpassed)", output)
    figures = {word.rstrip("s") if word.startswith("error") else word: int(n) for n, word in counts}
    failed = sorted(set(re.findall(r"^(\S+::\S+) (?:FAILED|ERROR)", output, flags=re.MULTILINE)))
    return {**figures, **({"failed_tests": ", ".join(failed)} if failed else {})}


def benchmark_figures(folder: Path, output: str) -> dict:
    """Tokens/s, MFU, peak memory and the ratio of each model and measurement of a benchmark's JSON, and of a profiled
    training step its launches, busy and wall milliseconds (its top kernels: the JSON and the log)."""
    result = json.loads((folder / "benchmark.json").read_text())
    sections = {"train": result["training"], **{f"generate {cache}": rows
                                                for cache, rows in result.get("generation", {}).items()}}
    figures = {}
    for label, rows in sections.items():
        for name in ("lineage", "reference"):
            row = rows.get(name) if isinstance(rows.get(name), dict) else {}
            for key in ("tokens_per_s", "mfu", "peak_memory_mib"):
                if key in row:
                    figures[f"{label} {name} {key}"] = row[key]
            for key in ("launches", "busy_ms", "wall_ms"):
                if key in row.get("profile", {}):
                    figures[f"{label} {name} profiled {key}"] = row["profile"][key]
        if "ratio" in rows:
            figures[f"{label} ratio"] = rows["ratio"]
    return figures


def env_figures(folder: Path, output: str) -> dict:
    return {"device": next((line.removeprefix("device: ") for line in output.splitlines()
                            if line.startswith("device: ")), None)}


# ----------------------------------------------------------------------------- the plan

def env_steps(folder: Path, dry: bool, seconds: float) -> list[Step]:
    return [Step("lineage env", ("train.env",), figures=env_figures)]


SHARDING_TESTS = "tests/train/run/test_distributed_fsdp.py"  # the GPU tests that launch processes (FSDP2, ZeRO)


def pytest_steps(folder: Path, dry: bool, seconds: float) -> list[Step]:
    """Every GPU-marked test (a dry run collects them) in two steps side by side, so that a step past its time loses
    only its own tests: those in one process (53 s on an H200), and the sharding configs (a plain run and three
    `accelerate launch`es of one process: 101 s with two failing early, ~130 s passing); a module whose imports are
    missing is reported."""
    if not (ROOT / "tests").is_dir():
        return []
    argv = ("pytest", "-m", "gpu", "-v", "-p", "no:randomly", "-p", "no:cacheprovider",
            "--continue-on-collection-errors", "--rootdir", str(ROOT))
    steps = [Step("pytest -m gpu", (*argv, "--ignore", str(ROOT / SHARDING_TESTS), str(ROOT / "tests")), 70,
                  pytest_figures, lane="in one process"),
             Step("pytest -m gpu (sharding)", (*argv, str(ROOT / SHARDING_TESTS)), 130, pytest_figures,
                  lane="launches")]
    return [step._replace(argv=(*step.argv, "--collect-only")) for step in steps] if dry else steps


# The benchmark rows of docs/performance.md's GPU table, the targets first: (name, its flags on a GPU, its
# tiny flags in a dry run, its compiled row's estimated seconds on one GPU). Measured on one H200 with 16 cores
# (2026-11-27): BERT 104 s, the Transformer 113 s (a compiled --reference row compiles two models, Lineage's and the
# reference's, ~45 s each after a ~12 s start); GPT-124M's under 125 s.
BENCHMARKS = (
    ("gpt-124m", "--model gpt-124m-prenorm --task causal-lm --batch_size 16 --seq_length 1024",
     "--model gpt-tiny --task causal-lm", 110),
    ("bert-base-unpadded", "--model bert-base --task mlm --batch_size 64 --seq_length 128 --sparse_prediction "
                           "--unpad_inputs", "--model bert-tiny --task mlm --sparse_prediction --unpad_inputs", 105),
    ("transformer-base", "--model transformer-base --config sinusoidal_layout=split --task seq2seq --batch_size 32 "
                         "--seq_length 128 --sparse_prediction",
     "--model transformer-tiny --config sinusoidal_layout=split --task seq2seq --sparse_prediction", 115),
    ("gpt-117m", "--model gpt-117m --task causal-lm --batch_size 32 --seq_length 512",  # its 512 positions
     "--model gpt-tiny --task causal-lm", 110),  # not a target: after the targets' eager rows
)
TARGETS = 3  # the first rows of BENCHMARKS; a dry run leaves out the rest (gpt-117m: the same gpt-tiny as gpt-124m)
EAGER_SECONDS = 20  # an eager row: start ~12 s, models and steps ~8 s
GENERATION = ("--model gpt-124m-prenorm --task causal-lm --batch_size 8 --seq_length 32 --max_new_tokens 128 "
              "--generate", "--model gpt-tiny --task causal-lm --max_new_tokens 4 --generate")
GENERATION_SECONDS = 60  # start ~12 s, the static cache's compiled decoding forward ~20 s a model, 4 x 128 steps
BENCHMARK_RUN = ("--mixed_precision bf16 --reference --steps 5 --warmup 2 --profile",  # on the GPU
                 "--mixed_precision no --reference --steps 1 --warmup 1 --batch_size 2 --seq_length 16 --profile")
TINY_GPT = "--config intermediate_size=128"  # the reference GPTs' feed-forward is 4 x hidden_size


def _benchmark(folder: Path, name: str, flags: str, run: str, weight: float = EAGER_SECONDS) -> Step:
    out = folder / _slug(name)
    argv = ("train.benchmark", *shlex.split(flags), *shlex.split(run), "--json", str(out / "benchmark.json"))
    return Step(name, argv, weight, benchmark_figures)


def benchmark_steps(folder: Path, dry: bool, seconds: float) -> list[Step]:
    """The targets compiled, generation with the dynamic and the static cache (which compiles its forward itself),
    then, while time lasts, the targets eager and the other rows compiled and eager; a dry run: the targets' tiny
    presets, eager only, and generation."""
    run = BENCHMARK_RUN[dry]
    if dry:
        rows = [_benchmark(folder, f"{name} eager", f"{tiny} {TINY_GPT}" if "gpt" in tiny else tiny, run)
                for name, _, tiny, _ in BENCHMARKS[:TARGETS]]
        return rows + [_benchmark(folder, "generation", f"{GENERATION[1]} {TINY_GPT}", run)]
    compiled = [_benchmark(folder, f"{name} compiled", flags, f"{run} --compile", estimate)
                for name, flags, _, estimate in BENCHMARKS]
    eager = [_benchmark(folder, f"{name} eager", flags, run, EAGER_SECONDS) for name, flags, _, _ in BENCHMARKS]
    generation = _benchmark(folder, "generation", GENERATION[0], run, GENERATION_SECONDS)
    return [*compiled[:TARGETS], generation, *eager[:TARGETS], *[row for pair in zip(compiled[TARGETS:],
                                                                                     eager[TARGETS:]) for row in pair]]


TRAIN_RUN = (("--mixed_precision", "bf16"), ("--mixed_precision", "no", "--max_steps", "2", "--eval_size", "8"))
QUIET = ("--progress_bar", "false", "--report_to", "none")
KILLED_RUN = (("--max_steps", "40", "--save_steps", "5"), ("--max_steps", "4", "--save_steps", "2"))  # killed at 5
TINY_RUN_SECONDS = 25  # a tiny recipe's run on one H200 (16 cores, beside the tests): start ~12 s, 6 steps, save


def _run(folder: Path, name: str, script: str, recipe: str, dry: bool, *keys: str, figures=run_figures,
         **options) -> Step:
    argv = (f"train.{script}", "--recipe", recipe, "--output_dir", str(folder / name), *QUIET, *TRAIN_RUN[dry], *keys)
    return Step(name, argv, TINY_RUN_SECONDS, figures=figures, **options)


def training_steps(folder: Path, dry: bool, seconds: float) -> list[Step]:
    """Every training command at its tiny recipe with bf16 (a dry run: no mixed precision, 2 steps), fine-tuning from
    the pretrained runs; `prepare` and a run from its store; a streamed run; a run killed at a checkpoint, resumed. In
    four lanes side by side (each step waits only for those it reads): BERT, GPT, the corpus, the resumed run."""
    corpus = ("--train_file", str(folder / "corpus" / "train.txt"), "--validation_file",
              str(folder / "corpus" / "validation.txt"))
    killed = ("--logging_steps", "1", "--save_total_limit", "2", *KILLED_RUN[dry])
    return [
        _run(folder, "pretrain_bert", "pretrain_bert", "bert-pretrain-tiny", dry, lane="bert"),
        _run(folder, "finetune_bert", "finetune", "bert-finetune-nli-tiny", dry,
             "--model", str(folder / "pretrain_bert" / "model"), lane="bert"),
        _run(folder, "translation_transformer", "train_translation", "transformer-translation-tiny", dry, lane="bert"),
        _run(folder, "pretrain_gpt", "pretrain_gpt", "gpt-pretrain-tiny", dry, lane="gpt"),
        _run(folder, "finetune_gpt", "finetune", "gpt-finetune-nli-tiny", dry,
             "--model", str(folder / "pretrain_gpt" / "model"), lane="gpt"),
        _run(folder, "translation_rnn", "train_translation", "rnn-translation-tiny", dry, lane="gpt"),
        Step("tokenizer", ("train.train_tokenizer", "--family", "gpt", "--vocab_size", "300", "--max_texts", "200",
                           "--output_dir", str(folder / "tokenizer")), 15, lane="gpt"),
        Step("python-docs", ("train.python_docs", str(folder / "corpus")), 15, lane="corpus"),
        Step("prepare", ("train.prepare", "--recipe", "gpt-pretrain-tiny", *corpus, "--num_proc", "2"), 15,
             lane="corpus"),
        _run(folder, "prepared_run", "pretrain_gpt", "gpt-pretrain-tiny", dry, *corpus, figures=prepared_figures,
             lane="corpus"),
        _run(folder, "streamed_run", "pretrain_gpt", "gpt-pretrain-tiny", dry, *corpus, "--streaming", "true",
             lane="corpus"),
        _run(folder, "killed_run", "pretrain_gpt", "gpt-pretrain-tiny", dry, *killed, kill_at_checkpoint=True,
             lane="resume"),
        _run(folder, "killed_run", "pretrain_gpt", "gpt-pretrain-tiny", dry, *killed, "--resume_from_checkpoint",
             "latest", figures=resumed_figures, lane="resume")._replace(name="resumed_run"),
    ]


# seconds of the pretraining run outside its training steps: start ~6 s, an 8000-token tokenizer ~8 s, tokenizing
# and packing ~5 s, the inductor cold compile ~40 s, evaluation and save ~7 s (the corpus, where written here, ~4 s)
PRETRAINING_OVERHEAD = 70
PRETRAINING = (("--model", "gpt-124m-prenorm", "--max_seq_length", "1024", "--per_device_train_batch_size", "16",
                "--tokenizer_vocab_size", "8000", "--compile", "true", "--mixed_precision", "bf16",
                "--max_steps", "300", "--warmup_steps", "20", "--learning_rate", "6e-4", "--logging_steps", "10"),
               ("--model", "gpt-tiny", "--max_seq_length", "64", "--per_device_train_batch_size", "8",
                "--mixed_precision", "no", "--max_steps", "4", "--logging_steps", "1"))


def pretraining_steps(folder: Path, dry: bool, seconds: float) -> list[Step]:
    """GPT-124M (pre-norm) pretrained on real text (the Python manual: the training part's corpus where it wrote
    one, else its own), packed, compiled, bf16, until its steps or its share of the budget are spent; a dry run: the
    tiny preset, 4 steps, not compiled."""
    texts = folder.parent / "training" / "corpus"
    written = all((texts / name).is_file() for name in ("train.txt", "validation.txt"))
    texts = texts if written else folder / "corpus"
    corpus = ("--train_file", str(texts / "train.txt"), "--validation_file", str(texts / "validation.txt"))
    budget = ("--max_train_seconds", str(max(10, round(seconds - PRETRAINING_OVERHEAD))))
    argv = ("train.pretrain_gpt", "--recipe", "gpt-pretrain-tiny", "--output_dir", str(folder / "gpt-124m"), *QUIET,
            *corpus, "--pack_documents", "true", "--save_steps", "0", *PRETRAINING[dry], *budget)
    own = [] if written else [Step("python-docs", ("train.python_docs", str(texts)), 4)]
    return [*own, Step("gpt-124m", argv, PRETRAINING_OVERHEAD, figures=curve_figures)]


PARTS = [
    Part("env", env_steps, "run as on the GPU"),
    Part("pytest", pytest_steps, "collected only (--collect-only): the GPU tests are counted, not run"),
    Part("training", training_steps, "on the CPU, no mixed precision, 2 steps each (the killed run 4, a checkpoint "
                                     "every 2)"),
    Part("benchmark", benchmark_steps, "tiny presets (gpt-tiny with a 4 x hidden feed-forward, bert-tiny, "
                                       "transformer-tiny), batch 2 x 16 tokens, 1 step after 1 warm-up, fp32; the "
                                       "compiled rows are skipped, and gpt-117m (its tiny preset is gpt-124m's)"),
    Part("pretraining", pretraining_steps, "gpt-tiny instead of gpt-124m-prenorm, 64 tokens, 4 steps, not compiled, "
                                           "fp32"),
]
PART = {part.name: part for part in PARTS}


class Stage(NamedTuple):
    parts: tuple[str, ...]  # run side by side (they check correctness; timing parts run alone)
    seconds: float  # of the default 630; another --budget_seconds scales every stage alike


# Estimates from the first run on one H200 with 16 cores (2026-11-27); a stage's time left over goes to the next. The
# whole plan needs ~630 s, more than one device call's 600: on a lent GPU it runs as two calls, the benchmark alone in
# the second (docs/performance.md, "GPU figures").
STAGES = (
    Stage(("env",), 10),  # `lineage env`: 5 s
    # pytest (pytest_steps): its two lanes, 70 and ~130 s; training (training_steps): four lanes of ~40-90 s (a tiny
    # run ~25 s, most of it the process start). Side by side (16 cores): ~140 s.
    Stage(("pytest", "training"), 140),
    # the targets compiled 110 + 105 + 115 (BENCHMARKS) and generation 60: generation takes what the stage has left;
    # the other rows only with time left over
    Stage(("benchmark",), 390),
    # PRETRAINING_OVERHEAD 70 s, then ~20 s of steps: 300 steps of 16 x 1024 tokens at ~30 ms (45% MFU) take ~9 s
    Stage(("pretraining",), 90),
)
SLACK = 1.5  # a step may take up to SLACK x its estimate where its share of its lane's time is less


# ----------------------------------------------------------------------------- running the plan

def step_env(out: Path, dry: bool) -> dict[str, str]:
    """Offline, the cache inside the output folder, this code first on the path; a dry run sees no GPU."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "LINEAGE_CACHE": str(out / "cache"),
           "HF_DATASETS_CACHE": str(out / "cache" / "datasets"), "PYTHONPATH": path}
    return {**env, "CUDA_VISIBLE_DEVICES": ""} if dry else env


def _wait(process: subprocess.Popen, seconds: float, checkpoints: Path | None) -> str:
    """How the step ended: passed, failed, timed out, or killed at a checkpoint; kills its process group."""
    deadline = time.monotonic() + seconds
    while process.poll() is None:
        killed = checkpoints is not None and complete_checkpoints(checkpoints)
        if killed or time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return "killed at a checkpoint" if killed else "timed out"
        time.sleep(0.05)
    if checkpoints is not None:
        return "failed"  # it ended before a checkpoint to kill it at
    return "passed" if process.returncode == 0 else "failed"


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def step_folder(step: Step, folder: Path) -> Path:
    """Where a step writes: its `--output_dir`, else the folder of its `--json`, else its part's `folder`."""
    if "--output_dir" in step.argv:
        return Path(step.argv[step.argv.index("--output_dir") + 1])
    if "--json" in step.argv:
        return Path(step.argv[step.argv.index("--json") + 1]).parent
    return folder


def run_step(step: Step, folder: Path, seconds: float, env: dict[str, str]) -> dict:
    """Run one step for at most `seconds`; its command, wall seconds, exit status, status, output tail and figures."""
    command = [sys.executable, "-m", *step.argv]
    log = folder / "logs" / f"{_slug(step.name)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    run = step_folder(step, folder)
    began = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        status = _wait(process, seconds, run / "checkpoints" if step.kill_at_checkpoint else None)
    output = log.read_text(errors="replace")
    row = {"step": step.name, "command": shlex.join(["python", "-m", *step.argv]), "status": status,
           "seconds": round(time.monotonic() - began, 1), "limit_seconds": round(seconds, 1),
           "exit_status": process.returncode, "log": str(log), "tail": output[-TAIL:], "figures": {}}
    if status == "passed" and step.figures is not None:
        try:
            row["figures"] = step.figures(run, output)
        except (OSError, ValueError, KeyError) as error:
            row["figures"] = {"problem": f"its figures could not be read: {error!r}"}
    if "problem" in row["figures"]:
        row["status"] = "failed"
    return row


def run_lane(part: str, steps: list[tuple[int, Step]], folder: Path, deadline: float,
             env: dict[str, str]) -> list[tuple[int, dict]]:
    """The (plan index, step) `steps` of one lane in turn, within `deadline` (monotonic seconds); once it is passed,
    the rest not run. Each row with its step's index."""
    rows = []
    for i, (index, step) in enumerate(steps):
        left = deadline - time.monotonic()
        if left <= 1:
            rows += [(j, {"step": s.name, "command": shlex.join(["python", "-m", *s.argv]),
                          "status": "not run (out of time)", "figures": {}}) for j, s in steps[i:]]
            break
        share = left * step.weight / sum(s.weight for _, s in steps[i:])
        rows.append((index, run_step(step, folder, max(share, min(left, SLACK * step.weight)), env)))
        print(f"{part} / {step.name}: {rows[-1][1]['status']} in {rows[-1][1]['seconds']} s", flush=True)
        if part == "env":
            print(rows[-1][1]["tail"], flush=True)
    return rows


def run_part(part: Part, out: Path, dry: bool, deadline: float, env: dict[str, str]) -> dict:
    """The lanes of `part` side by side (`run_lane`), each within `deadline`; its rows in the plan's order."""
    folder = out / part.name
    steps = part.steps(folder, dry, deadline - time.monotonic())
    lanes: dict[str, list[tuple[int, Step]]] = {}
    for index, step in enumerate(steps):
        lanes.setdefault(step.lane, []).append((index, step))
    with ThreadPoolExecutor(max_workers=max(1, len(lanes))) as pool:
        done = pool.map(lambda lane: run_lane(part.name, lane, folder, deadline, env), lanes.values())
        rows = [row for _, row in sorted((row for lane in done for row in lane), key=lambda pair: pair[0])]
    statuses = {row["status"] for row in rows}
    status = "passed" if statuses <= {"passed", "killed at a checkpoint"} and rows else (
        "failed" if "failed" in statuses or not rows else "timed out")
    if not steps:
        status = "skipped: no tests folder beside the code (an installed package)"
    return {"part": part.name, "status": status, "dry_run": part.dry_run if dry else None, "steps": rows}


def run_stage(stage: Planned, out: Path, dry: bool, deadline: float, env: dict[str, str], start: float) -> list[dict]:
    """The parts of `stage` side by side, a thread each (their lanes a thread each, a step its own process), within
    `deadline`; each part's result with its stage, when it began (seconds after `start`) and its seconds."""
    def timed(part: Part) -> dict:
        began = time.monotonic()
        result = run_part(part, out, dry, deadline, env)
        return {**result, "stage": stage.name, "began": round(began - start, 1),
                "seconds": round(time.monotonic() - began, 1)}

    with ThreadPoolExecutor(max_workers=len(stage.parts)) as pool:
        return list(pool.map(timed, stage.parts))


# ----------------------------------------------------------------------------- the report

def driver() -> dict:
    """The GPU's driver, name and memory as nvidia-smi reports them (empty where there is none)."""
    if shutil.which("nvidia-smi") is None:
        return {}
    query = ["nvidia-smi", "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader"]
    try:
        line = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return {}
    return dict(zip(("driver", "gpu", "gpu_memory"), (cell.strip() for cell in line.split(","))))


def header(args: argparse.Namespace, parts: list[Planned]) -> dict:
    import torch

    return {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "device": device(), "torch": torch.__version__, "cuda": torch.version.cuda, **driver(),
            "python": platform.python_version(), "packages": {**versions(), **{p: installed(p) for p in PACKAGES}},
            "dry_run": args.dry_run, "budget_seconds": args.budget_seconds,
            "plan": {stage.name: round(stage.budget, 1) for stage in parts}}


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def render(report: dict) -> str:
    """report.md: the header, then one table per part, every figure beside its command."""
    head = {k: v for k, v in report.items() if k not in ("parts", "packages")}
    lines = ["# lineage gpu-check", "", *[f"- {k}: {_cell(v)}" for k, v in head.items()],
             "- packages: " + ", ".join(f"{k} {v or '-'}" for k, v in report["packages"].items()), ""]
    for part in report["parts"]:
        lines += [f"## {part['part']}: {part['status']}", "",
                  f"Stage {part['stage']}: began {part['began']} s into the check, took {part['seconds']} s.", ""]
        if part["dry_run"]:
            lines += [f"Dry run: {part['dry_run']}.", ""]
        lines += ["| step | status | seconds (limit) | command | figures |", "|---|---|---|---|---|"]
        for row in part["steps"]:
            figures = "; ".join(f"{k} {_cell(v)}" for k, v in row["figures"].items() if k != "loss_curve")
            timing = f"{row.get('seconds', '-')} ({row.get('limit_seconds', '-')})"
            lines.append(f"| {row['step']} | {row['status']} | {timing} | `{row['command']}` | {figures} |")
        curves = [(row["step"], row["figures"]["loss_curve"]) for row in part["steps"]
                  if "loss_curve" in row["figures"]]
        lines += [""] + [f"Loss curve of {name} (step, loss): " + ", ".join(f"{s} {loss}" for s, loss in curve)
                         for name, curve in curves]
        lines += [f"{row['step']} ({row['status']}), the end of its output:\n\n```\n{row['tail'][-1500:]}\n```\n"
                  for row in part["steps"] if row["status"] not in ("passed", "killed at a checkpoint")
                  and "tail" in row]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the command

def make_parser() -> argparse.ArgumentParser:
    parser = CommandParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--output_dir", required=True, help="a new or empty folder (or this command's own earlier "
                                                            "output, with --overwrite_output_dir)")
    parser.add_switch("--overwrite_output_dir", help="replace this command's earlier output in --output_dir")
    parser.add_switch("--dry_run", help="the same plan on the CPU at tiny sizes, in a minute or two")
    parser.add_argument("--parts", default=",".join(p.name for p in PARTS),
                        help=f"comma-separated, run in the plan's order: {', '.join(p.name for p in PARTS)}")
    parser.add_argument("--budget_seconds", type=number(float, 0, "a number of seconds", above=True), default=630.0,
                        help="wall seconds for the whole plan, shared among the parts asked")
    return parser


class Planned(NamedTuple):
    name: str  # its parts' names joined by " + "
    budget: float  # seconds
    parts: tuple[Part, ...]


def plan(parts: str, budget: float) -> list[Planned]:
    """The stages of the parts `parts` names (those parts alone), in the plan's order, each with its share of
    `budget`; a ValueError naming a bad part."""
    names = [name.strip() for name in parts.split(",") if name.strip()]
    unknown = [name for name in names if name not in {p.name for p in PARTS}]
    if unknown or not names:
        raise ValueError(f"--parts: unknown part {unknown[0]!r}" if unknown else "--parts: name at least one part")
    chosen = [(tuple(PART[name] for name in stage.parts if name in names), stage.seconds) for stage in STAGES]
    total = sum(seconds for stage, seconds in chosen if stage)
    return [Planned(" + ".join(p.name for p in stage), budget * seconds / total, stage) for stage, seconds in chosen
            if stage]


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[Planned]]:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        parts = plan(args.parts, args.budget_seconds)
    except ValueError as error:
        parser.error(f"{error}; parts: {', '.join(p.name for p in PARTS)}")
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        parser.error(f"no CUDA device: torch {torch.__version__} sees none (CUDA {torch.version.cuda}); run it on a "
                     "GPU machine, or pass --dry_run true to run the plan on the CPU at tiny sizes")
    return args, parts


def main(argv: list[str] | None = None) -> dict:
    args, parts = parse_args(argv)
    folder = run_folder.check_writer_output(args.output_dir, COMMAND, overwrite=args.overwrite_output_dir)
    with run_folder.output_in_place(folder, COMMAND):
        report = header(args, parts)
        env, began, deadline = step_env(folder, args.dry_run), time.monotonic(), time.monotonic()
        report["parts"] = []
        for stage in parts:
            deadline += stage.budget
            report["parts"] += run_stage(stage, folder, args.dry_run, deadline, env, began)
        report["seconds"] = round(time.monotonic() - began, 1)
        (folder / "report.json").write_text(strict_json.dumps(report, indent=1))
        (folder / "report.md").write_text(render(report))
    print(f"{COMMAND}: " + ", ".join(f"{p['part']} {p['status']}" for p in report["parts"]) +
          f" in {report['seconds']} s; report in {folder / 'report.md'}")
    return report


if __name__ == "__main__":
    run_script(main)
