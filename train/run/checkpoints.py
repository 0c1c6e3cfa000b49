"""Checkpoints of a training run: `<output_dir>/checkpoints/step-N`, written atomically, the last K kept.

`save_checkpoint` writes the unsharded weights, optimizer, scheduler and random states and `lineage_state.json` into
a temporary folder renamed into place, so a killed save leaves the previous one whole; `resume_path` finds and
verifies one, `check_resume` refuses another run's or changed data, `load_checkpoint` restores it at any world size.
docs/training.md ("Checkpoints and resume"), docs/reliability.md ("kill -9"), docs/scaling.md ("Checkpoints at any
world size").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import datasets
import torch
from accelerate import Accelerator
from accelerate.checkpointing import load_accelerator_state, save_accelerator_state
from accelerate.utils import MODEL_NAME, DistributedType, extract_model_from_parallel
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from train.data.errors import DataFileNotFoundError
from train.data.files import EMBEDDED_PREFIX, data_files
from train.data.fingerprints import file_fingerprint
from train.data.staging import honour_umask
from train.run import strict_json

STATE_FILE = "lineage_state.json"
STREAM_STATE = "stream_state.json"  # the position in a training stream
# recipe keys acting only before the first step (the tokenizer a run trains): a resume cannot change them
FIXED_AT_START = ("tokenizer_vocab_size", "tokenizer_train_size")
SHAPES_THE_MODEL = ("lora",)  # the adapter the checkpoint holds (which weights train, their rank and scale)
CHECKPOINT_PREFIX = "step-"
TMP, OLD, DELETING = ".tmp-", ".old-", ".del-"  # prefixes of folders a save is writing, replacing, deleting


# config keys that say how the model is run, not what it is: free to differ on resume
_RUNTIME_CONFIG = {"transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype", "use_cache",
                   "_attn_implementation", "attn_implementation", "_attn_implementation_autoset", "unpad_inputs",
                   "sparse_prediction", "output_attentions", "output_hidden_states", "return_dict", "auto_map",
                   "custom_pipelines", "_commit_hash"}


class CheckpointError(ValueError):
    """A resume path with no checkpoint, or a corrupt one."""


class ResumeMismatchError(CheckpointError):
    """A sound checkpoint written by another model, tokenizer or data than this run's."""


class DataChangedError(ResumeMismatchError):
    """A sound checkpoint of this run whose data has changed since it was written (`allow_data_change` accepts it)."""


@dataclass
class TrainState:
    step: int = 0  # optimizer steps done
    epoch: int = 0
    batch_in_epoch: int = 0  # micro-batches of this epoch already consumed (per process)
    micro_batch_examples: int = 0  # examples in one micro-batch of all processes together (0: not recorded)


def complete_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints under `root`, oldest first: `step-N` folders with their state file, and a
    `.old-step-N` whose `step-N` is gone (a run killed while replacing that step's checkpoint)."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and (p / STATE_FILE).is_file()
             and (p.name.startswith(CHECKPOINT_PREFIX) or _orphaned_old(p))]
    return sorted(found, key=lambda p: int(p.name.removeprefix(OLD)[len(CHECKPOINT_PREFIX):]))


def _orphaned_old(path: Path) -> bool:
    name = path.name.removeprefix(OLD)
    return path.name.startswith(OLD) and name.startswith(CHECKPOINT_PREFIX) and not (path.parent / name).exists()


def verify_checkpoint(path: Path) -> dict:
    """The checkpoint's state record, after checking that every file it lists is there with its size."""
    if not path.is_dir():
        raise CheckpointError(f"resume_from_checkpoint: {path} does not exist; give 'latest' or a checkpoint folder "
                              f"({CHECKPOINT_PREFIX}N under <output_dir>/checkpoints)")
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise CheckpointError(f"{path} holds no complete checkpoint (no {STATE_FILE}); complete ones are "
                              f"folders {CHECKPOINT_PREFIX}N under <output_dir>/checkpoints")
    try:
        record = json.loads(state_file.read_text())
        files = record["files"]
        TrainState(**record["state"])
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint {path} is corrupt: unreadable {STATE_FILE} ({err})") from err
    for name, size in files.items():
        file = path / name
        if not file.is_file() or file.stat().st_size != size:
            got = file.stat().st_size if file.is_file() else "missing"
            raise CheckpointError(f"checkpoint {path} is corrupt: {name} should have {size} bytes, got {got}")
    return record


def resume_path(spec: str | None, root: Path) -> Path | None:
    """The verified checkpoint that `resume_from_checkpoint` names (`latest` under `root`, or a folder)."""
    if not spec:
        return None
    if spec == "latest":
        found = complete_checkpoints(root)
        if not found:
            raise CheckpointError(f"resume_from_checkpoint=latest, but {root} holds no complete checkpoint")
        path = found[-1]
    else:
        path = Path(spec)
    verify_checkpoint(path)
    return path


def run_identity(config, tokenizer, recipe, examples: int | str) -> dict:
    """What a checkpoint must share with the run that resumes it, and the recipe's changeable keys. `examples`: the
    number of training examples, or `"stream"` for a stream (whose length is unknown)."""
    # the data as the recipe names it, without the command's default: what identities have always recorded
    identity = {"model_config": config_identity(config),
                "dataset": {"source": recipe.data_source("train", ""), "dataset_config": recipe.dataset_config,
                            "examples": examples},
                "hyperparameters": recipe.training_dict()}
    identity["dataset"]["seed"] = recipe.seed  # the epoch order the data position counts in
    fingerprint = data_fingerprint(recipe.data_source("train"), recipe.dataset_config, recipe.data_files())
    if fingerprint is not None:
        identity["dataset"]["fingerprint"] = fingerprint
    if tokenizer is not None:
        identity["tokenizer"] = vocabulary_identity(tokenizer)
    return identity


def config_identity(config) -> dict:
    """A model config's fields as a checkpoint records them: without the keys that say how a model is run."""
    fields = json.loads(json.dumps(config.to_dict(), default=str))
    return {k: v for k, v in sorted(fields.items()) if k not in _RUNTIME_CONFIG}


def vocabulary_identity(tokenizer) -> dict:
    """What a checkpoint records of its tokenizer: its token count and a hash of its vocabulary."""
    vocab = json.dumps(sorted(tokenizer.get_vocab().items())).encode()
    return {"tokens": len(tokenizer), "vocabulary_sha256": hashlib.sha256(vocab).hexdigest()[:16]}


def data_fingerprint(source: str, dataset_config: str | None, files: Sequence[Path] | None = None
                     ) -> dict[str, str] | None:
    """What a checkpoint records of its training data's content: {path: fingerprint} of `files`, those the run reads
    (`Recipe.data_files`; else `data_files(source)`, or every file of a saved dataset's folder), {name: revision} of a
    Hub dataset; None for the embedded corpus and a Hub dataset without a revision."""
    if not source or source.startswith(EMBEDDED_PREFIX):
        return None
    path = Path(source).expanduser()
    if not files and path.exists():
        try:
            files = data_files(source)
        except DataFileNotFoundError:
            files = None
        files = files or sorted(p for p in path.rglob("*") if p.is_file())
    if files:
        return {str(f): file_fingerprint(f) for f in files}
    try:
        revision = datasets.load_dataset_builder(source, dataset_config).hash
    except (ConnectionError, OSError, ValueError):
        return None
    return {source: str(revision)} if revision else None


def _data_changes(before: dict, now: dict) -> dict[str, list]:
    """{file (or Hub name): [the checkpoint's fingerprint, this run's]} of the data whose fingerprint differs (None:
    not in that run's data); nothing when either side has no fingerprint (a checkpoint of an earlier release)."""
    then, current = before.get("fingerprint"), now.get("fingerprint")
    if then is None or current is None:
        return {}
    return {name: [then.get(name), current.get(name)] for name in sorted(set(then) | set(current))
            if then.get(name) != current.get(name)}


def _refuse_data_change(path: Path, changes: dict[str, list]) -> None:
    lines = [f"{name}: not in the data the checkpoint was written with" if old is None else
             f"{name}: in the data the checkpoint was written with, not in this run's" if new is None else
             f"{name}: changed since the checkpoint was written (fingerprint {old} then, {new} now)"
             for name, (old, new) in changes.items()]
    raise DataChangedError(
        f"checkpoint {path} was written on other data than this run reads (a file's fingerprint is its size and a "
        f"hash of its first and last MiB):\n  " + "\n  ".join(lines) + "\nresume on the data the checkpoint was "
        "written with, or pass --allow_data_change true to continue this run on the data as it is now")


def check_resume(path: Path, identity: dict) -> dict[str, list]:
    """Refuse a checkpoint whose model config, tokenizer or data differ from `identity` (`DataChangedError` unless
    `allow_data_change`); return the changeable keys that differ, {key: [checkpoint's, this run's]}."""
    written = verify_checkpoint(path).get("run")
    if not written:
        return {}
    allow = bool(identity["hyperparameters"].get("allow_data_change"))
    data = _data_changes(written.get("dataset", {}), identity.get("dataset", {}))
    if data and not allow:
        _refuse_data_change(path, data)
    problems = []
    for part, what in (("model_config", "model config"), ("tokenizer", "tokenizer"), ("dataset", "data")):
        before, now = written.get(part, {}), identity.get(part, {})
        free = ("fingerprint", "examples") if part == "dataset" and allow else ("fingerprint",)
        for key in sorted(set(before) | set(now)):
            if before.get(key) != now.get(key) and not (part == "dataset" and key in free):
                problems.append(f"{what}: the checkpoint was written with {key}={before.get(key)!r}, this run has "
                                f"{key}={now.get(key)!r}")
    if problems:
        raise ResumeMismatchError(
            f"checkpoint {path} belongs to another run than this recipe describes (the checkpoint itself is sound):\n  "
            + "\n  ".join(problems) + "\nresume with the recipe that wrote it, or start a new run in another "
            "output_dir (or with --overwrite_output_dir true)")
    before, now = written.get("hyperparameters", {}), identity["hyperparameters"]
    changed = {k: [before[k], now[k]] for k in now if k in before and before[k] != now[k]}
    changed.update({f"data {name}": change for name, change in data.items()})
    examples = [written.get("dataset", {}).get("examples"), identity["dataset"].get("examples")]
    if examples[0] != examples[1]:  # allowed with the data's change
        changed["data examples"] = examples
    for keys, why in ((FIXED_AT_START, "it acted before the first step (a resumed run keeps the tokenizer it trained)"),
                      (SHAPES_THE_MODEL, "it shapes the model the checkpoint holds (its adapter: which weights train, "
                                         "their rank and scale)")):
        refused = [k for k in keys if k in changed]
        if refused:
            raise ResumeMismatchError(
                "; ".join(f"recipe key {k!r} is {changed[k][1]!r} but the run was started with {changed[k][0]!r}"
                          for k in refused)
                + f": {why}, so a resume cannot change it; resume with the value the run started with, or start a new "
                "run in another output_dir")
    return changed


def load_checkpoint(accelerator: Accelerator, path: Path, micro_batch_examples: int, root: Path) -> TrainState:
    """Restore model, optimizer, scheduler and random states; return the run's position. `micro_batch_examples`:
    this run's per-process batch times its process count, which must equal the checkpoint's. `root`: this run's
    checkpoints folder, where a DeepSpeed checkpoint resumed in another number of processes or without DeepSpeed is
    converted (`plan_resume`)."""
    record = verify_checkpoint(path)
    state = TrainState(**record["state"])
    if state.micro_batch_examples and micro_batch_examples != state.micro_batch_examples:
        raise CheckpointError(
            f"checkpoint {path} was written with micro-batches of {state.micro_batch_examples} examples over all "
            f"processes, this run has {micro_batch_examples} (per_device_train_batch_size x processes): the data "
            f"position would not continue; set per_device_train_batch_size so that the product is "
            f"{state.micro_batch_examples}")
    written = record.get("launch", {}).get("num_processes", accelerator.num_processes)
    optimizer = accelerator._optimizers[0].optimizer
    fresh = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    try:
        launch = record.get("launch", {})
        if _needs_universal(accelerator, launch):
            with _universal(accelerator, path, root) as folder:
                accelerator.load_state(str(folder))
            _own_steps(optimizer)
        elif accelerator.distributed_type is DistributedType.DEEPSPEED:
            accelerator.load_state(str(path))
        elif launch.get("distributed_type") == DistributedType.DEEPSPEED.value:
            with _universal(accelerator, path, root) as folder:
                _load_universal_portably(accelerator, folder / MODEL_NAME)
            load_accelerator_state(str(path), [], [], accelerator._schedulers, [], accelerator.process_index,
                                   accelerator.scaler)
        else:
            _load_portable(accelerator, path)
    except CheckpointError:
        raise
    except Exception as err:  # a truncated or foreign file; nothing was written anywhere
        raise CheckpointError(f"checkpoint {path} is corrupt or was written by another model: loading it failed "
                              f"({type(err).__name__}: {err})") from err
    _recipe_hyperparameters(optimizer, fresh, accelerator._schedulers)
    if written != accelerator.num_processes:
        accelerator.print(f"checkpoint {path.name} was written by {written} processes and resumes in "
                          f"{accelerator.num_processes}: weights, optimizer, schedule and data position carry over; "
                          f"random states of processes it did not have start from the seed")
    state.micro_batch_examples = micro_batch_examples
    return state


def plan_resume(accelerator: Accelerator, path: Path) -> None:
    """What resuming `path` asks of the run before `accelerator.prepare`. A DeepSpeed checkpoint (DeepSpeed's own
    format, partitioned) resumes in any number of processes: under DeepSpeed at the ZeRO stage that wrote it (in
    another number through DeepSpeed's universal format, which DeepSpeed must be told of before it starts), and in a
    run without DeepSpeed from that universal format too (`_universal`). A portable checkpoint (one process, DDP,
    FSDP) resumes in any of those, not under DeepSpeed."""
    launch = verify_checkpoint(path).get("launch", {})
    if accelerator.distributed_type is not DistributedType.DEEPSPEED:
        return
    written = launch.get("distributed_type", DistributedType.NO.value)
    if written != DistributedType.DEEPSPEED.value:
        raise CheckpointError(f"checkpoint {path} was written by a run with distributed_type={written}, and this run "
                              f"has distributed_type=DEEPSPEED: it resumes in one process, or under DDP or FSDP, in "
                              f"any number of processes; its run's final folder (or --model <that folder> in a new "
                              f"run) starts a DeepSpeed run")
    stage = accelerator.state.deepspeed_plugin.zero_stage
    if launch.get("deepspeed_zero_stage", stage) != stage:
        raise CheckpointError(f"checkpoint {path} was written under ZeRO stage {launch['deepspeed_zero_stage']} and "
                              f"this run is ZeRO stage {stage}: a DeepSpeed checkpoint resumes at the stage that "
                              f"wrote it (in any number of processes), or without DeepSpeed; launch with that stage's "
                              f"config")
    if _needs_universal(accelerator, launch):
        accelerator.state.deepspeed_plugin.deepspeed_config.setdefault("checkpoint", {})["load_universal"] = True


def _needs_universal(accelerator: Accelerator, launch: dict) -> bool:
    """A DeepSpeed run resuming a DeepSpeed checkpoint written by another number of processes (its `launch`)."""
    return (accelerator.distributed_type is DistributedType.DEEPSPEED
            and launch.get("num_processes", accelerator.num_processes) != accelerator.num_processes)


def _own_steps(optimizer) -> None:
    """Give each partition of a DeepSpeed optimizer its own Adam step count. DeepSpeed 0.19's ZeRO-3 universal loading
    gives every partition one shared step tensor, which each partition's update then advances in place: with two
    parameter groups the count grew by 2 per step, and the bias correction (so the losses after the first resumed
    step) went off by 3e-4."""
    for state in optimizer.optimizer.state.values():
        if torch.is_tensor(state.get("step")):
            state["step"] = state["step"].clone()


@contextlib.contextmanager
def _universal(accelerator: Accelerator, path: Path, root: Path):
    """DeepSpeed checkpoint `path` in DeepSpeed's universal format (full fp32 weights and Adam moments per parameter,
    which any number of processes loads), written by `ds_to_universal` into a temporary folder of this run (`root`)
    beside the checkpoint's scheduler and random states; yields the folder, deleted once every process has read it
    (or by the next save, if the run is killed first)."""
    folder = root / f"{TMP}universal-{path.name}"
    if accelerator.is_main_process:
        accelerator.print(f"converting checkpoint {path.name} to DeepSpeed's universal format, which any number of "
                          f"processes loads")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        command = [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                   str(path / MODEL_NAME), "--output_folder", str(folder / MODEL_NAME), "--inject_missing_state"]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            raise CheckpointError(f"checkpoint {path} could not be converted to DeepSpeed's universal format, which "
                                  f"resuming it in another number of processes or without DeepSpeed needs (is "
                                  f"deepspeed installed?):\n{(result.stdout + result.stderr)[-2000:]}")
        for file in path.iterdir():
            if file.is_file() and file.name != STATE_FILE:
                shutil.copy2(file, folder / file.name)
    accelerator.wait_for_everyone()
    try:
        yield folder
    finally:
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            shutil.rmtree(folder, ignore_errors=True)


def _load_universal_portably(accelerator: Accelerator, folder: Path) -> None:
    """Load a universal checkpoint's weights and Adam state (`folder`: its `pytorch_model/`) into a run without
    DeepSpeed, as `_load_portable` loads a portable checkpoint's."""
    model, optimizer = accelerator._models[0], accelerator._optimizers[0].optimizer
    unwrapped = extract_model_from_parallel(model)
    params = dict(unwrapped.named_parameters())
    names = {id(param): name for name, param in params.items()}
    zero = folder / "zero"

    def read(name: str, key: str) -> torch.Tensor:  # ZeRO-3 keeps each tensor flat
        value = torch.load(zero / name / f"{key}.pt", map_location="cpu", weights_only=False)
        return (value["param"] if isinstance(value, dict) else value).detach().reshape(params[name].shape)

    weights = {name: read(name, "fp32") for name in params}
    first = next(iter(params))
    if (zero / first / "step.pt").is_file():  # ZeRO-1/2 keep the step beside each parameter, ZeRO-3 apart
        step = torch.load(zero / first / "step.pt", map_location="cpu", weights_only=False)
    else:
        step = torch.load(zero / "optimizer_state.pt", map_location="cpu",
                          weights_only=False)["optimizer_state_dict"]["state"][0]["step"]
    state = {name: {"step": torch.as_tensor(step, dtype=torch.float32).clone(), "exp_avg": read(name, "exp_avg"),
                    "exp_avg_sq": read(name, "exp_avg_sq")} for name in params}
    groups = [{**{k: v for k, v in group.items() if k != "params"}, "params": [names[id(p)] for p in group["params"]]}
              for group in optimizer.param_groups]
    _set_full_state(model, optimizer, weights, {"state": state, "param_groups": groups})


def load_stream_state(path: Path) -> dict:
    """The position in the training stream saved in checkpoint `path`; refused when it has none."""
    verify_checkpoint(path)
    if not (path / STREAM_STATE).is_file():
        raise CheckpointError(f"checkpoint {path} holds no position in a training stream (it was written by a run "
                              f"that did not stream): resume it with streaming: false, or start a new run")
    try:
        return json.loads((path / STREAM_STATE).read_text())
    except ValueError as err:
        raise CheckpointError(f"checkpoint {path} is corrupt: unreadable {STREAM_STATE} ({err})") from err


def _recipe_hyperparameters(optimizer, fresh: list[dict], schedulers) -> None:
    """Give the optimizer this run's hyperparameters (the checkpoint's came with its state) and rebase the schedule on
    this run's learning rate at the restored step: a changed learning rate, schedule or max_steps takes effect."""
    for group, hyper in zip(optimizer.param_groups, fresh):
        group.update(hyper)
    for wrapped in schedulers:
        scheduler = getattr(wrapped, "scheduler", wrapped)
        if not hasattr(scheduler, "lr_lambdas"):
            continue
        scheduler.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        rates = [base * fn(scheduler.last_epoch) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
        for group, rate in zip(optimizer.param_groups, rates):
            group["lr"] = rate
        scheduler._last_lr = rates


def save_checkpoint(accelerator: Accelerator, root: Path, state: TrainState, keep: int, launch: dict | None = None,
                    identity: dict | None = None, stream_state: dict | None = None) -> Path:
    """Save into a temporary folder, record it (`launch`, `identity`), rename it into place, keep the last `keep`.
    `stream_state`: the position in a training stream."""
    final = root / f"{CHECKPOINT_PREFIX}{state.step:08d}"
    tmp = root / f"{TMP}{final.name}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        _clear_leftovers(root)
        tmp.mkdir()  # before any process writes its random states into it
    accelerator.wait_for_everyone()
    if accelerator.distributed_type is DistributedType.DEEPSPEED:
        accelerator.save_state(str(tmp))
    else:
        _save_portable(accelerator, tmp)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        if stream_state is not None:
            (tmp / STREAM_STATE).write_text(strict_json.dumps(stream_state))
        honour_umask(tmp)
        _write_record(tmp, state, launch, identity)
        _move_into_place(tmp, final)
        for stale in complete_checkpoints(root)[:-max(1, keep)]:
            _delete(stale)
    accelerator.wait_for_everyone()
    return final


def _clear_leftovers(root: Path) -> None:
    """Put back a checkpoint a killed run left as `.old-step-N`; delete what killed saves left half written."""
    for path in sorted(root.iterdir()):
        if _orphaned_old(path) and (path / STATE_FILE).is_file():
            os.replace(path, root / path.name.removeprefix(OLD))
        elif path.name.startswith((TMP, OLD, DELETING)):
            shutil.rmtree(path, ignore_errors=True)
    _fsync(root)


def _delete(folder: Path) -> None:
    """Rename first, so a checkpoint killed halfway through its deletion is never listed as complete."""
    doomed = folder.parent / f"{DELETING}{folder.name.removeprefix(OLD)}"
    os.replace(folder, doomed)
    _fsync(folder.parent)
    shutil.rmtree(doomed, ignore_errors=True)


_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def _save_portable(accelerator: Accelerator, folder: Path) -> None:
    """Full weights and optimizer state on the main process, the scheduler, and each process's random states."""
    model, optimizer = accelerator._models[0], accelerator._optimizers[0].optimizer
    weights = get_model_state_dict(model, options=_FULL)
    optimizer_state = get_optimizer_state_dict(model, optimizer, options=_FULL)
    if accelerator.is_main_process:
        for alias in _aliases(extract_model_from_parallel(model)):
            weights.pop(alias, None)
        save_file({k: v.contiguous() for k, v in weights.items()}, folder / "model.safetensors",
                  metadata={"format": "pt"})
        torch.save(optimizer_state, folder / "optimizer.bin")
    save_accelerator_state(str(folder), [], [], accelerator._schedulers, [], accelerator.process_index,
                           accelerator.step, accelerator.scaler)


def _load_portable(accelerator: Accelerator, folder: Path) -> None:
    """Every process reads the full state and keeps its own part (its shard under FSDP)."""
    model, optimizer = accelerator._models[0], accelerator._optimizers[0].optimizer
    _set_full_state(model, optimizer, load_file(folder / "model.safetensors"),
                    torch.load(folder / "optimizer.bin", map_location="cpu", weights_only=True))
    load_accelerator_state(str(folder), [], [], accelerator._schedulers, [], accelerator.process_index,
                           accelerator.scaler)


def _set_full_state(model, optimizer, weights: dict[str, torch.Tensor], optimizer_state: dict) -> None:
    """Give every process its part (its shard under FSDP) of full `weights` (tied copies left out) and of a full
    optimizer state keyed by parameter name."""
    for alias, name in _aliases(extract_model_from_parallel(model)).items():
        weights[alias] = weights[name]
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
    set_optimizer_state_dict(model, optimizer, optimizer_state, options=StateDictOptions(full_state_dict=True))


def _aliases(model) -> dict[str, str]:
    """{name: the first name of the same parameter} for parameters reachable under several names (a tied LM head is
    the word embedding): left out of `model.safetensors`, as `save_pretrained` does, and given back on loading."""
    first: dict[int, str] = {}
    aliases = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            aliases[name] = first[id(param)]
        else:
            first[id(param)] = name
    return aliases


def _write_record(folder: Path, state: TrainState, launch: dict | None, identity: dict | None = None) -> None:
    """The state file, written last: only once every file it lists is on disk."""
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    for name in files:
        _fsync(folder / name)
    record = {"state": asdict(state), "files": files, "launch": launch or {}, "run": identity or {},
              "time": time.time()}
    with (folder / STATE_FILE).open("w") as f:
        f.write(strict_json.dumps(record, indent=1))
        f.flush()
        os.fsync(f.fileno())
    _fsync(folder)


def _fsync(path: Path) -> None:
    """Flush a file, or a folder's entries (renames), to disk."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (PermissionError, IsADirectoryError):  # Windows opens no folders: there a rename is not flushed
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename; a step saved again (a resumed run) replaces the old folder only once the new one is complete."""
    if not final.exists():
        os.replace(tmp, final)
        _fsync(final.parent)
        return
    old = final.parent / f"{OLD}{final.name}"
    shutil.rmtree(old, ignore_errors=True)
    os.replace(final, old)
    os.replace(tmp, final)
    _fsync(final.parent)
    shutil.rmtree(old, ignore_errors=True)


__all__ = ["CHECKPOINT_PREFIX", "STATE_FILE", "STREAM_STATE", "CheckpointError", "DataChangedError",
           "ResumeMismatchError", "TrainState", "check_resume", "complete_checkpoints", "config_identity",
           "data_fingerprint", "load_checkpoint", "load_stream_state", "plan_resume", "resume_path", "run_identity",
           "save_checkpoint", "verify_checkpoint", "vocabulary_identity"]
