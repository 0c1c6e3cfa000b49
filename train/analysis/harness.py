"""EleutherAI's lm-evaluation-harness as `lineage evaluate` runs it: the harness's own `hf` model, loaded as a Hub
user loads the folder (`trust_remote_code=True`), on tasks built before the model is loaded.

`load_tasks` builds every task the user named (a registered name, a group, a tag or a task YAML; `--include_path`
adds a folder of YAMLs, and the shipped ones in `train/configs/tasks` are always included) and fetches its data, so
that an unknown task or data that is not in the offline cache is refused, naming `--tasks`, before any model is read.
`run` hands those tasks and one `HFLM` to `lm_eval.simple_evaluate`, exactly what `lm_eval --model hf --model_args
pretrained=<folder>,trust_remote_code=True` runs: one model load, one pass per request. `task_hashes` are the hashes
`lm_eval --log_samples` writes. lm-eval is the optional extra `eval` (`require_lm_eval`). docs/evaluation.md.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

SHIPPED_TASKS = files("train") / "configs" / "tasks"  # package data: the offline example tasks
EXTRA = 'pip install "lineage[eval]" (from a checkout: pip install -e ".[eval]")'


class HarnessError(ValueError):
    """A `lineage evaluate` argument the harness cannot run: an unknown task, data not at hand, lm-eval missing."""


def require_lm_eval() -> None:
    """Refuse, naming the extra that installs it, when lm-eval cannot be imported."""
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise HarnessError(f"--tasks runs EleutherAI's lm-evaluation-harness, which is not installed: {EXTRA}") \
            from None


def task_manager(include_path: str | None, metadata: dict[str, Any]):
    """The harness's task index with the shipped tasks and `include_path` (a folder of task YAMLs)."""
    from lm_eval.tasks import TaskManager

    paths = [str(SHIPPED_TASKS)]
    if include_path is not None:
        if not Path(include_path).is_dir():
            raise HarnessError(f"--include_path {include_path!r} is no folder; give a folder of task YAML files")
        paths.append(str(include_path))
    return TaskManager(include_path=paths, metadata=metadata)


def load_tasks(names: list[str], manager) -> list:
    """The task (or group) objects of `names`, their data fetched; refused naming `--tasks` when a name is neither a
    task, group, tag nor YAML file, or its data cannot be read offline."""
    import datasets

    expanded, unknown = [], []
    for name in names:  # a name may be a pattern (hellaswag, arc_*) or a YAML file
        found = [name] if Path(name).is_file() else manager.match_tasks([name])
        expanded += found
        unknown += [] if found else [name]
    if unknown:
        raise HarnessError(f"--tasks: {', '.join(map(repr, unknown))} is no task, group or tag of "
                           f"lm-evaluation-harness {_version()} nor a task YAML file; `lm_eval ls tasks` lists them, "
                           "and --include_path adds a folder of your own")
    built = []
    for name in dict.fromkeys(expanded):
        try:
            loaded = manager.load(name)
        except (ConnectionError, FileNotFoundError, datasets.exceptions.DatasetNotFoundError) as error:
            raise HarnessError(f"--tasks {name!r}: its data cannot be read ({error}); with HF_DATASETS_OFFLINE=1 or "
                               "no network a task runs only on data already in the Hugging Face cache: run it once "
                               "online, or give a task whose data is local") from None
        group = loaded["groups"].get(name)
        built.extend([group] if group is not None else loaded["tasks"].values())
    return built


def _version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


def model_arguments(model: str, revision: str | None, seq2seq: bool, max_length: int | None = None) -> dict[str, Any]:
    """The `--model_args` of `lm_eval --model hf` for `model`, as a Hub user loads a Lineage folder; `max_length`:
    the tokens of a request the model reads (lm_eval's default: the model's positions)."""
    arguments = {"pretrained": model, "trust_remote_code": True}
    if revision is not None:
        arguments["revision"] = revision
    if max_length is not None:
        arguments["max_length"] = max_length
    if seq2seq:
        arguments["backend"] = "seq2seq"
    return arguments


def run(tasks: list, arguments: dict[str, Any], manager, *, limit: float | None, num_fewshot: int | None,
        batch_size: int | str, device: str | None) -> dict[str, Any]:
    """The harness's results for `tasks` (with `samples`), the model loaded once as `lm_eval --model hf` does."""
    from lm_eval import simple_evaluate
    from lm_eval.api.registry import get_model

    device = device or "cuda:0"  # lm_eval's own default, which falls back to the CPU where there is no GPU
    lm = get_model("hf").create_from_arg_obj(arguments, {"batch_size": batch_size, "device": device})
    if arguments.get("backend") == "seq2seq":
        _bound_decoder_length(lm)
    with quiet_git():
        return simple_evaluate(model=lm, tasks=tasks, task_manager=manager, limit=limit, num_fewshot=num_fewshot,
                               batch_size=batch_size, device=device, log_samples=True)


@contextlib.contextmanager
def quiet_git() -> Iterator[None]:
    """lm-eval records the commit of the working folder (`get_git_commit_hash`, which `simple_evaluate` calls: `git
    describe`, else the folder's .git), and git says `fatal: not a git repository ...` on the user's stderr outside
    one: within, the process's stderr goes to the null device for that call alone; the hash is lm-eval's own."""
    from lm_eval import evaluator

    original = evaluator.get_git_commit_hash

    def quiet() -> str | None:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 2)
                return original()
        finally:
            os.dup2(saved, 2)
            os.close(saved)

    evaluator.get_git_commit_hash = quiet
    try:
        yield
    finally:
        evaluator.get_git_commit_hash = original


def _bound_decoder_length(lm) -> None:
    """lm_eval asks an encoder-decoder's generate() for `max_length` = its encoder context + `max_gen_toks` (a causal
    LM's sum), which a decoder of fewer positions refuses; the length is capped at the decoder's positions."""
    positions = getattr(lm.model.config, "max_position_embeddings", None)
    if not positions:
        return
    generate = lm._model_generate

    def bounded(*args, max_length: int, **kwargs):
        return generate(*args, max_length=min(max_length, positions), **kwargs)

    lm._model_generate = bounded


def task_hashes(samples: dict[str, list[dict]]) -> dict[str, str]:
    """Per task, the hash of its documents, prompts and targets, as `lm_eval --log_samples` records it."""
    from lm_eval.utils import hash_string

    return {task: hash_string("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in rows))
            for task, rows in samples.items()}


def scores(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """{task: {metric: value}} of the harness's results, without standard errors (`acc,none` -> `acc`)."""
    table = {}
    for task, figures in results["results"].items():
        table[task] = {key.removesuffix(",none"): float(value) for key, value in figures.items()
                       if "," in key and "_stderr" not in key and isinstance(value, (int, float))}
    return table


__all__ = ["EXTRA", "HarnessError", "SHIPPED_TASKS", "load_tasks", "model_arguments", "quiet_git", "require_lm_eval",
           "run", "scores", "task_hashes", "task_manager"]
