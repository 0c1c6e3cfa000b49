"""Checkpoints of a training run: `<output_dir>/checkpoints/step-N`, written atomically, the last K kept.

A checkpoint is Accelerate's `save_state` (model, optimizer, scheduler, random states) plus `lineage_state.json`:
the engine's `TrainState` and the size of every file. It is written to a temporary folder and renamed into place
once complete, so a crash during a save never touches the previous good one; a checkpoint without its state file
is incomplete and never resumed from. `resume_path("latest" | folder)` finds and verifies one before anything is
built; `load_checkpoint` restores it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from accelerate import Accelerator

STATE_FILE = "lineage_state.json"
CHECKPOINT_PREFIX = "step-"


class CheckpointError(ValueError):
    """A resume path with no checkpoint, or a corrupt one."""


@dataclass
class TrainState:
    step: int = 0  # optimizer steps done
    epoch: int = 0
    batch_in_epoch: int = 0  # micro-batches of this epoch already consumed (per process)


def complete_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints under `root`, oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(CHECKPOINT_PREFIX)
             and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX):]))


def verify_checkpoint(path: Path) -> dict:
    """The checkpoint's state record, after checking that every file it lists is there with its size."""
    if not path.is_dir():
        raise CheckpointError(f"resume path {path} does not exist")
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
    tmp = root / f".tmp-{final.name}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        _write_record(tmp, state)
        _move_into_place(tmp, final)
        for stale in complete_checkpoints(root)[:-max(1, keep)]:
            shutil.rmtree(stale, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def _write_record(folder: Path, state: TrainState) -> None:
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
    record = {"state": asdict(state), "files": files, "time": time.time()}
    with (folder / STATE_FILE).open("w") as f:
        json.dump(record, f, indent=1)
        f.flush()
        os.fsync(f.fileno())


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename; a step saved again (a resumed run) replaces the old folder only once the new one is complete."""
    if not final.exists():
        os.replace(tmp, final)
        return
    old = final.parent / f".old-{final.name}"
    shutil.rmtree(old, ignore_errors=True)
    os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


__all__ = ["CHECKPOINT_PREFIX", "STATE_FILE", "CheckpointError", "TrainState", "complete_checkpoints",
           "load_checkpoint", "resume_path", "save_checkpoint", "verify_checkpoint"]
