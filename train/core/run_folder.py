"""Who owns an output folder: one run at a time, and no run silently over another's files.

A run claims its `output_dir` before it writes anything there (`claim`, called by `get_tokenizer` before it saves a
trained tokenizer and by the engine before its first log line; only the main process of a launch claims):

- `<output_dir>` must be a folder (it is created when missing); a file there is refused naming the recipe key;
- a folder holding another run's work (`WORK`: checkpoints, log, model) is refused unless the recipe resumes
  (`resume_from_checkpoint`) or asks to start over (`overwrite_output_dir`, which prints every path of `RUN_FILES`
  it deletes and deletes only those), as transformers' Trainer refuses a non-empty `output_dir`; the record and
  tokenizer of a run that stopped before its first step (a refused recipe) are replaced, each path printed;
- `<output_dir>/.lock` (created atomically, holding the process id and host) keeps a second live run out; a lock
  whose process is gone (a killed run) is reported and taken over, never obeyed forever;
- `<output_dir>/run.json` is the run's record: the recipe's hash, the start time, the process and host, the
  command, and one entry per resume (with the recipe keys that changed, `note_resume`).

The lock is released when the run publishes its model (`release`) or its process exits.
"""

from __future__ import annotations

import atexit
import datetime
import hashlib
import json
import os
import shutil
import socket
import sys
from pathlib import Path

import yaml

RECORD, LOCK = "run.json", ".lock"
RUN_FILES = (RECORD, "checkpoints", "logs", "tokenizer", "model", "adapter", "loss_curve.png")
WORK = ("checkpoints", "logs", "model", "adapter")  # a run that left none of these never trained: it is replaced
_claims: dict[Path, object] = {}  # folder -> the recipe object of the run in this process that claimed it


class OutputDirError(RuntimeError):
    """An output folder that this run may not write into."""


def recipe_hash(recipe) -> str:
    return hashlib.sha256(yaml.safe_dump(recipe.training_dict(), sort_keys=True).encode()).hexdigest()[:16]


def claim(recipe) -> Path:
    """Check `recipe.output_dir` (module docstring), take its lock and write the run record; idempotent for one run
    (the same recipe object). Returns the folder."""
    folder = Path(recipe.output_dir).resolve()
    if _claims.get(folder) is recipe:
        return folder
    _check_is_folder(Path(recipe.output_dir))
    _take_lock(folder)
    found = [folder / name for name in RUN_FILES if (folder / name).exists()]
    trained = any(path.name in WORK for path in found)
    if found and not recipe.resume_from_checkpoint:
        if trained and not recipe.overwrite_output_dir:
            _release_lock(folder)
            raise OutputDirError(
                f"output_dir {folder} holds another run's files ({', '.join(p.name for p in found)}); to continue that "
                f"run pass --resume_from_checkpoint latest, to delete its files and start over pass "
                f"--overwrite_output_dir true, or choose another --output_dir")
        why = "overwrite_output_dir" if trained else "a run that stopped before training (no checkpoint, log or model)"
        for path in found:
            print(f"{why}: deleting {path}", flush=True)
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    _write_record(folder, recipe)
    _claims[folder] = recipe
    return folder


def note_resume(recipe, checkpoint: Path, step: int, changed: dict) -> None:
    """Add a resume (its checkpoint, step and the recipe keys changed since: {key: [before, now]}) to the record."""
    path = Path(recipe.output_dir).resolve() / RECORD
    record = json.loads(path.read_text()) if path.is_file() else {}
    record.setdefault("resumes", []).append({"checkpoint": str(checkpoint), "step": step, "changed": changed,
                                             "time": _now(), "pid": os.getpid()})
    path.write_text(json.dumps(record, indent=1))


def release(recipe) -> None:
    """Give the folder's lock back (the run has published its model)."""
    folder = Path(recipe.output_dir).resolve()
    _claims.pop(folder, None)
    _release_lock(folder)


def _check_is_folder(path: Path) -> None:
    for candidate in (path, *path.parents):
        if candidate.exists() and not candidate.is_dir():
            raise OutputDirError(f"recipe key 'output_dir': {candidate} is a file, not a folder; give a folder path "
                                 f"(it is created when missing)")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _write_record(folder: Path, recipe) -> None:
    path = folder / RECORD
    previous = json.loads(path.read_text()) if recipe.resume_from_checkpoint and path.is_file() else {}
    record = {"recipe_sha256": recipe_hash(recipe), "started": _now(), "pid": os.getpid(),
              "host": socket.gethostname(), "command": sys.argv, "resumes": previous.get("resumes", [])}
    if previous:
        record["first_started"] = previous.get("first_started", previous.get("started"))
    path.write_text(json.dumps(record, indent=1))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _take_lock(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / LOCK
    mine = {"pid": os.getpid(), "host": socket.gethostname(), "started": _now()}
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = json.loads(lock.read_text())
            except (ValueError, OSError):
                holder = {}
            pid, host = holder.get("pid"), holder.get("host")
            if pid == os.getpid() and host == mine["host"]:
                return  # this process's own (an earlier run in it that raised)
            if host == mine["host"] and isinstance(pid, int) and not _alive(pid):
                print(f"output_dir {folder}: removing the stale lock of process {pid}, which no longer runs",
                      flush=True)
                lock.unlink(missing_ok=True)
                continue
            raise OutputDirError(
                f"output_dir {folder} is in use by another run (process {pid} on {host}, since "
                f"{holder.get('started')}): two runs in one folder overwrite each other's checkpoints and log; wait "
                f"for it, choose another --output_dir, or delete {lock} if that run is gone") from None
        with os.fdopen(fd, "w") as f:
            json.dump(mine, f)
        atexit.register(_release_lock, folder)
        return


def _release_lock(folder: Path) -> None:
    lock = folder / LOCK
    try:
        holder = json.loads(lock.read_text())
    except (ValueError, OSError):
        return
    if holder.get("pid") == os.getpid():
        lock.unlink(missing_ok=True)


__all__ = ["LOCK", "OutputDirError", "RECORD", "RUN_FILES", "claim", "note_resume", "recipe_hash", "release"]
