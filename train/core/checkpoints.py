"""Checkpoints of a training run: `<output_dir>/checkpoints/step-N`, written atomically, the last K kept.

A checkpoint is Accelerate's `save_state` (model, optimizer, scheduler, random states) plus `lineage_state.json`:
the engine's `TrainState` and the size of every file. It is written to a temporary folder and renamed into place
once complete, so a crash during a save never touches the previous good one; a checkpoint without its state file
is incomplete and never resumed from. `resume_path("latest" | folder)` finds and verifies one before anything is
built; `load_checkpoint` restores it.

Killed at any instant (SIGKILL, tested in tests/test_reliability.py): every file is fsynced before the state file
is written, and the folder's entry after the rename, so a complete checkpoint stays complete; folders left by a
killed save (`.tmp-step-N`, a stale checkpoint half deleted as `.del-step-N`) are never resumed from and are
removed by the next save. A step saved again replaces its folder in two renames (`step-N` -> `.old-step-N`, the
new one -> `step-N`); killed between them, `.old-step-N` is that step's checkpoint until the next save puts it
back.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from accelerate import Accelerator
from accelerate.utils import extract_model_from_parallel

STATE_FILE = "lineage_state.json"
CHECKPOINT_PREFIX = "step-"
TMP, OLD, DELETING = ".tmp-", ".old-", ".del-"  # prefixes of folders a save is writing, replacing, deleting


class CheckpointError(ValueError):
    """A resume path with no checkpoint, or a corrupt one."""


@dataclass
class TrainState:
    step: int = 0  # optimizer steps done
    epoch: int = 0
    batch_in_epoch: int = 0  # micro-batches of this epoch already consumed (per process)


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


def load_checkpoint(accelerator: Accelerator, path: Path) -> TrainState:
    """Restore model, optimizer, scheduler and random states; return the run's position."""
    record = verify_checkpoint(path)
    try:
        accelerator.load_state(str(path))
    except Exception as err:  # a truncated or foreign file; nothing was written anywhere
        raise CheckpointError(f"checkpoint {path} is corrupt: loading it failed ({type(err).__name__}: {err})") from err
    return TrainState(**record["state"])


def save_checkpoint(accelerator: Accelerator, root: Path, state: TrainState, keep: int) -> Path:
    """`save_state` into a temporary folder, record it, rename it into place, keep the last `keep`."""
    final = root / f"{CHECKPOINT_PREFIX}{state.step:08d}"
    tmp = root / f"{TMP}{final.name}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        _clear_leftovers(root)
    accelerator.wait_for_everyone()
    hook = accelerator.register_save_state_pre_hook(_drop_tied_copies)
    try:
        accelerator.save_state(str(tmp))
    finally:
        hook.remove()
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        _write_record(tmp, state)
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


def _drop_tied_copies(models: list, weights: list[dict], output_dir: str) -> None:
    """Drop from the state dicts `save_state` is about to write the tied copies each model declares
    (`_tied_weights_keys`: the LM head that is the word embedding), as `save_pretrained` does. A safetensors file
    holds a tensor under one name only; left in, Accelerate would drop the copy itself and print "Removed shared
    tensor ... This should be OK" at every checkpoint. Harmless: `load_state` (safetensors' `load_model`)
    accepts exactly the missing aliases, and the tie lives in the model, so the head gets its weight back."""
    for model, state in zip(models, weights):  # weights is empty under FSDP / DeepSpeed, which save their own way
        tied = getattr(extract_model_from_parallel(model), "get_expanded_tied_weights_keys", dict)()
        for target, source in tied.items():
            for key in [k for k in state if k == target or k.endswith("." + target)]:  # "module." under DDP
                twin = key[:len(key) - len(target)] + source
                if twin in state and state[twin].data_ptr() == state[key].data_ptr():
                    del state[key]


def _write_record(folder: Path, state: TrainState) -> None:
    """The state file, written last: only once every file it lists is on disk."""
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    for name in files:
        _fsync(folder / name)
    record = {"state": asdict(state), "files": files, "time": time.time()}
    with (folder / STATE_FILE).open("w") as f:
        json.dump(record, f, indent=1)
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


__all__ = ["CHECKPOINT_PREFIX", "STATE_FILE", "CheckpointError", "TrainState", "complete_checkpoints",
           "load_checkpoint", "resume_path", "save_checkpoint", "verify_checkpoint"]
