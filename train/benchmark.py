"""Time training steps (and greedy generation) of a model preset, alone or against its transformers reference.

    python -m train.benchmark --model gpt-117m --task causal-lm --batch_size 8 --seq_length 128 --steps 10 --reference
    lineage benchmark --model gpt-124m-prenorm --task causal-lm --mixed_precision bf16 --compile --json bench.json

`--model` is read as every command reads it (`train.setup.models`); the weights are random either way. Reports the
median of `--steps` timed steps after `--warmup` untimed ones (ms/step, tokens/s, TFLOP/s and MFU by
`train.run.flops`, peak memory); `--reference` times the transformers model of the same weights
interleaved with Lineage's (`ratio` = reference ms / Lineage ms). docs/performance.md, "`lineage benchmark`".
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch
import transformers
import yaml
from transformers import CompileConfig

from modeling.conversion import to_transformers
from train.analysis import throughput
from train.cli import CommandParser, number, run_script
from train.run import flops
from train.run.compilation import compile_model, compiler_error
from train.run.run_folder import OutputDirError, check_writer_file, write_output_json
from train.setup import models
from train.setup.presets import available_presets, check_model_overrides, load_model_config

REFERENCE_FAMILIES = ("lineage-gpt", "lineage-bert", "lineage-transformer")
OLD_FLAGS = {"--revision": "--model_revision", "--sparse-prediction": "--sparse_prediction",
             "--unpad-inputs": "--unpad_inputs", "--batch-size": "--batch_size", "--seq-len": "--seq_length",
             "--new-tokens": "--max_new_tokens", "--peak-tflops": "--peak_tflops",
             "--dtype": "--mixed_precision"}  # old spelling -> the flag now
OLD_PRECISION = {"fp32": "no"}  # an old value of --dtype -> its --mixed_precision word


def make_parser() -> argparse.ArgumentParser:
    parser = CommandParser(description=__doc__.strip().splitlines()[0], old_flags=OLD_FLAGS)
    parser.add_argument("--model", required=True, help=f"a preset ({', '.join(available_presets())}), a config.json, "
                                                       "a model folder or Hub id, Lineage or a supported transformers "
                                                       "checkpoint (its config, converted; weights are random)")
    parser.add_argument("--model_revision", default=None, help="Hub branch, tag or commit of --model (its config)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of the model config (repeatable; YAML values), e.g. "
                             "sinusoidal_layout=split for the Marian reference")
    parser.add_argument("--task", required=True, choices=tuple(throughput.TASKS))
    parser.add_switch("--sparse_prediction",
                      help="Lineage's training forward with sparse_prediction=True (the output head on labelled "
                           "positions only, as pretrain_bert and train_translation train; --task mlm or seq2seq)")
    parser.add_switch("--unpad_inputs",
                      help="Lineage BERT's training forward with unpad_inputs=True (no compute on padding; --task "
                           "mlm; random batches have no padding, so this times the unpadded kernels' overhead)")
    parser.add_argument("--batch_size", type=number(int, 1, "a batch size"), default=8)
    parser.add_argument("--seq_length", type=number(int, 1, "a number of tokens"), default=128,
                        help="tokens in each sequence (the full length)")
    parser.add_argument("--steps", type=number(int, 1, "a number of steps"), default=10,
                        help="timed steps (or generate calls); the median is kept")
    parser.add_argument("--warmup", type=number(int, 0, "a number of steps"), default=2,
                        help="untimed steps first (compilation happens here)")
    parser.add_switch("--compile", help="torch.compile the model(s) before the first step")
    parser.add_argument("--mixed_precision", choices=("no", "bf16"), default="no",
                        type=lambda word: OLD_PRECISION.get(word, word),
                        help="bf16: autocast mixed precision, as the recipes' mixed_precision: bf16")
    parser.add_switch("--reference", help="also time the transformers reference model")
    parser.add_switch("--profile", help="after the timed steps, one training step of each model under torch.profiler: "
                                        "its kernel launches, GPU-busy against wall milliseconds and top kernels "
                                        "(on a CPU its aten operators), in the table's notes and the JSON")
    parser.add_switch("--generate", help="also time greedy generation (dynamic and static cache)")
    parser.add_argument("--max_new_tokens", type=number(int, 1, "a number of tokens"), default=None,
                        help="tokens each generate call makes (min_new_tokens = max_new_tokens; default 32)")
    parser.add_argument("--peak_tflops", type=number(float, 0, "a number of TFLOP/s", above=True), default=None,
                        help="the GPU's peak TFLOP/s for MFU (default: the table in train.run.flops)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here (a new file)")
    parser.add_switch("--overwrite_json", help="replace the --json file of an earlier benchmark (nothing else)")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        config = model_config(args.model, config_overrides(args.model, args.config, args.model_revision),
                              args.model_revision)
        check_arguments(args, config, device())
        if args.json is not None:
            args.json = check_writer_file(args.json, "benchmark", overwrite=args.overwrite_json)
    except (ValueError, FileNotFoundError, OutputDirError) as error:  # RecipeError is a ValueError
        parser.error(str(error))
    args.config = config
    return args


def model_config(model: str, overrides: dict, revision: str | None = None):
    """The Lineage config `--model` names (`train.setup.models`: converted for a transformers checkpoint; `revision`
    of a Hub id), with `overrides`."""
    source = models.resolve_model(model, revision, revision_argument="--model_revision")
    if not source.pretrained:
        return load_model_config(model, **overrides)
    return type(source.config).from_dict({**source.config.to_dict(), **overrides})


def config_overrides(model: str, pairs: list[str], revision: str | None = None) -> dict:
    """`--config KEY=VALUE` pairs, each key a field of the model's config."""
    if any("=" not in pair for pair in pairs):
        raise ValueError(f"--config expects KEY=VALUE, got {', '.join(p for p in pairs if '=' not in p)}")
    overrides = {key: yaml.safe_load(value) for key, value in (pair.split("=", 1) for pair in pairs)}
    if overrides:
        source = models.resolve_model(model, revision, revision_argument="--model_revision")
        check_model_overrides(overrides, source.config, argument="--config")
    return overrides


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_arguments(args: argparse.Namespace, config, target: torch.device) -> None:
    """Every setting against the model and the machine, before a model is built or a step runs."""
    if args.max_new_tokens is not None and not args.generate:
        raise ValueError("--max_new_tokens is the length of each timed generate call, read with --generate only: "
                         "add --generate, or leave it out")
    args.max_new_tokens = 32 if args.max_new_tokens is None else args.max_new_tokens
    if args.compile and args.warmup < 1:
        raise ValueError("--warmup must be >= 1 with --compile (the first step compiles)")
    if args.peak_tflops is not None and target.type != "cuda":
        raise ValueError("--peak_tflops sets the GPU peak for MFU, which is not reported on a CPU")
    families = throughput.TASK_FAMILIES[args.task]
    if config.model_type not in families:
        raise ValueError(f"--task {args.task} needs a {' or '.join(families)} model; --model {args.model} is "
                         f"{config.model_type}")
    if args.sparse_prediction and args.task == "causal-lm":
        raise ValueError("--sparse_prediction is a forward option of masked-LM and seq2seq models (--task mlm or "
                         "seq2seq); a causal LM's loss already skips the logits")
    if args.unpad_inputs and args.task != "mlm":
        raise ValueError("--unpad_inputs is a forward option of Lineage BERT (--task mlm)")
    if args.generate and args.task == "mlm":
        raise ValueError("--generate times text generation, which a masked LM (--task mlm) does not do")
    if args.reference and config.model_type not in REFERENCE_FAMILIES:
        raise ValueError(f"--reference: transformers has no reference model for {config.model_type}")
    positions = getattr(config, "max_position_embeddings", None)
    longest = args.seq_length + (args.max_new_tokens if args.generate and args.task == "causal-lm" else 0)
    if positions is not None and longest > positions:
        made = f" + --max_new_tokens {args.max_new_tokens}" if longest > args.seq_length else ""
        raise ValueError(f"--seq_length {args.seq_length}{made} is longer than the model's {positions} positions "
                         "(max_position_embeddings)")
    if args.generate and args.task == "seq2seq" and positions is not None and args.max_new_tokens + 1 > positions:
        raise ValueError(f"--max_new_tokens {args.max_new_tokens} needs {args.max_new_tokens + 1} decoder positions; "
                         f"the model has {positions} (max_position_embeddings)")
    if args.compile and compiler_error(target.type) is not None:
        raise ValueError(f"--compile: torch.compile does not work on {target.type} with this torch "
                         f"{torch.__version__} ({compiler_error(target.type)})")


def build_models(args: argparse.Namespace, target: torch.device) -> dict[str, torch.nn.Module]:
    """Lineage (random weights, seeded) and, with --reference, the transformers model holding the same weights."""
    torch.manual_seed(args.seed)
    lineage = getattr(transformers, throughput.TASKS[args.task]).from_config(args.config).to(target)
    models = {"lineage": lineage}
    if args.reference:
        models["reference"] = to_transformers(lineage)
    return models


def benchmark_training(args: argparse.Namespace, models: dict, target: torch.device, peak: float | None) -> dict:
    batch = throughput.training_batch(args.config, args.task, args.batch_size, args.seq_length, target, args.seed)
    step_flops = flops.training_flops(flops.matmul_parameters(models["lineage"]), flops.attention_layers(args.config),
                                      args.config.hidden_size, args.batch_size, args.seq_length)
    options = {key: True for key in ("sparse_prediction", "unpad_inputs") if getattr(args, key)}
    steps = {name: throughput.TrainingStep(model, batch, target, args.mixed_precision,
                                           options if name == "lineage" else {})
             for name, model in models.items()}
    memory = {}
    for name, step in steps.items():
        if args.compile:
            compile_model(step.model, True, device_type=target.type)
        memory[name] = throughput.peak_memory_mib(target, step)  # the first warm-up step
        for _ in range(args.warmup - 1):
            step()
    seconds = throughput.interleaved_seconds(steps, args.steps, target)
    tokens = args.batch_size * args.seq_length
    rows = {name: throughput.summarize(seconds[name], tokens, step_flops, peak, memory[name]) for name in steps}
    if args.profile:
        for name, step in steps.items():
            rows[name]["profile"] = throughput.profile_step(step, target)
    return {"flops_per_step": step_flops, **rows, **ratio(rows)}


def ratio(rows: dict) -> dict:
    if "reference" not in rows:
        return {}
    return {"ratio": rows["reference"]["ms_per_step"] / rows["lineage"]["ms_per_step"]}


def generation_kwargs(args: argparse.Namespace, model: torch.nn.Module, cache: str, target: torch.device) -> dict:
    kwargs = {"do_sample": False, "num_beams": 1, "max_new_tokens": args.max_new_tokens,
              "min_new_tokens": args.max_new_tokens, "pad_token_id": model.config.pad_token_id}
    if cache == "static":
        compiled = CompileConfig(fullgraph=True, mode="reduce-overhead" if target.type == "cuda" else "default")
        compiled._compile_all_devices = True  # transformers compiles the static-cache forward on GPUs only otherwise
        kwargs.update(cache_implementation="static", compile_config=compiled)
    return kwargs


def benchmark_generation(args: argparse.Namespace, models: dict, target: torch.device) -> dict:
    """Greedy generation with each cache; `static` only for models whose forward compiles in one graph."""
    prompt = throughput.training_batch(args.config, args.task, args.batch_size, args.seq_length, target,
                                       args.seed)["input_ids"]
    results = {}
    for cache in ("dynamic", "static"):
        able = {name: model.eval() for name, model in models.items()
                if cache == "dynamic" or type(model)._can_compile_fullgraph}
        if not able:
            results[cache] = {"not_run": {name: f"{type(model).__name__} does not declare `_can_compile_fullgraph`"
                                          for name, model in models.items()}}
            continue
        runs = {name: _generate_call(model, prompt, generation_kwargs(args, model, cache, target), target,
                                     args.mixed_precision)
                for name, model in able.items()}
        memory = {name: throughput.peak_memory_mib(target, run) for name, run in runs.items()}  # warm-up (compiles)
        seconds = throughput.interleaved_seconds(runs, args.steps, target)
        tokens = args.batch_size * args.max_new_tokens
        rows = {name: throughput.summarize(seconds[name], tokens, None, None, memory[name]) for name in runs}
        results[cache] = {**rows, **ratio(rows)}
        unable = [name for name in models if name not in able]
        if unable:
            results[cache]["not_run"] = {name: f"{type(models[name]).__name__} does not declare "
                                               "`_can_compile_fullgraph`" for name in unable}
    return results


def _generate_call(model, prompt: torch.Tensor, kwargs: dict, target: torch.device, mixed_precision: str):
    def run():
        with torch.inference_mode(), throughput.precision(target, mixed_precision):
            output = model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)
        new = output.shape[1] - (prompt.shape[1] if not model.config.is_encoder_decoder else 1)
        if new != kwargs["max_new_tokens"]:
            raise RuntimeError(f"{type(model).__name__} made {new} tokens instead of {kwargs['max_new_tokens']}")

    return run


def run(args: argparse.Namespace, models: dict[str, torch.nn.Module]) -> dict:
    target = device()
    peak = flops.peak_tflops(target, args.mixed_precision, args.peak_tflops)
    result = {
        "model": args.model, "task": args.task, "batch_size": args.batch_size, "seq_length": args.seq_length,
        "steps": args.steps, "warmup": args.warmup, "mixed_precision": args.mixed_precision, "compile": args.compile,
        "sparse_prediction": args.sparse_prediction, "unpad_inputs": args.unpad_inputs,
        "device": torch.cuda.get_device_name(target) if target.type == "cuda" else f"cpu ({torch.get_num_threads()} "
                                                                                   "threads)",
        "peak_tflops": peak, "memory": throughput.memory_measure(target),
        "reference_class": type(models["reference"]).__name__ if "reference" in models else None,
    }
    result["training"] = benchmark_training(args, models, target, peak)
    if args.generate:
        result["max_new_tokens"] = args.max_new_tokens
        result["generation"] = benchmark_generation(args, models, target)
    return result


def table(result: dict, with_mfu: bool) -> str:
    """The results as a fixed-width text table, one line per model and measurement."""
    header = ["measurement", "model", "ms/call", "tokens/s", "TFLOP/s"] + (["MFU"] if with_mfu else []) + \
        [f"peak MiB ({result['memory']})", "ratio ref/lineage"]
    lines, notes = [header], []
    sections = [("train step", result["training"])] + [
        (f"generate ({cache} cache)", rows) for cache, rows in result.get("generation", {}).items()]
    for label, rows in sections:
        for name in ("lineage", "reference"):
            if name in rows.get("not_run", {}):
                notes.append(f"{label}, {name}: not run, {rows['not_run'][name]}")
            if name not in rows:
                continue
            row = rows[name]
            cells = [label, result["reference_class"] if name == "reference" else "lineage",
                     f"{row['ms_per_step']:.1f}", f"{row['tokens_per_s']:.0f}",
                     f"{row['tflops']:.3g}" if "tflops" in row else "-"]
            if with_mfu:
                cells.append(f"{row['mfu']:.1%}" if "mfu" in row else "-")
            ratio = f"{rows['ratio']:.3f}" if "ratio" in rows and name == "reference" else ""
            cells += [f"{row['peak_memory_mib']:.0f}", ratio]
            lines.append(cells)
    widths = [max(len(line[i]) for line in lines if i < len(line)) for i in range(len(header))]
    return "\n".join(["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines] + notes +
                     profile_lines(result))


def profile_lines(result: dict, top: int = 5) -> list[str]:
    """A line per profiled model: launches, busy against wall milliseconds, its `top` kernels or operators."""
    lines = []
    for name in ("lineage", "reference"):
        profile = result["training"].get(name, {}).get("profile")
        if profile is not None:
            model = result["reference_class"] if name == "reference" else "lineage"
            ranked = "; ".join(f"{kernel[:60]} x{calls} {ms:.2f} ms" for kernel, calls, ms in profile["top"][:top])
            lines.append(f"profiled step, {model}: {profile['launches']} launches, busy {profile['busy_ms']:.1f} of "
                         f"{profile['wall_ms']:.1f} ms; top: {ranked}")
    return lines


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    try:
        models = build_models(args, device())
    except ValueError as error:  # the reference cannot hold this configuration
        make_parser().error(f"--reference: {error}")
    result = run(args, models)
    print(f"{args.model} {args.task} batch {args.batch_size} x {args.seq_length}, mixed precision "
          f"{args.mixed_precision}{', compiled' if args.compile else ''}, on {result['device']}; median of "
          f"{args.steps} after {args.warmup} warm-up")
    print(table(result, with_mfu=device().type == "cuda"))
    if args.json is not None:
        write_output_json(args.json, "benchmark", result)
    return result


if __name__ == "__main__":
    run_script(main)
