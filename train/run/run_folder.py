"""Who owns an output folder: one run at a time, and a run deletes only what it wrote itself.

`claim` (the main process, from `train.run.engine.start_run`) checks the folder (`check_output_dir`), takes its
`.lock` and starts `run.json`, whose manifest (`record_written`) lists every file the run writes as it writes it;
what a later run may delete or resume into is decided by that manifest alone; `overwrite_output_dir` sets an
earlier run's files aside and deletes them only once the new run trains. `withdraw` undoes the claim of a run
refused before it trained (putting set-aside files back); `release` gives the lock back. The commands that write a
folder of their own use `check_writer_output` and `staged_output`. docs/training.md ("Run folders").
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from train.data.staging import process_alive, staged
from train.run.checkpoints import CHECKPOINT_PREFIX, DELETING, OLD, TMP

RECORD, LOCK, OUTPUT_RECORD = "run.json", ".lock", ".lineage-output.json"
RUN_FILES = ("checkpoints", "logs", "tokenizer", "model", "adapter", "loss_curve.png")  # what a run writes
WORK = ("checkpoints", "logs", "model", "adapter")  # a run that left none of these never trained: it is replaced
APPENDED = ("logs",)  # written to as the run goes: recorded by size, which only grows
_SAMPLE = 1 << 20  # bytes hashed from each end of a file: a fingerprint, not a full read of a multi-GB checkpoint
_claims: dict[Path, object] = {}  # folder -> the recipe object of the run in this process that claimed it
_fresh: dict[Path, bool] = {}  # folder -> whether its claim wrote a new record into it (True) or a new folder (None)
_set_aside: dict[Path, Path] = {}  # folder -> where its claim moved an earlier run's files (overwrite_output_dir)
ASIDE = ".overwritten-"  # + the claiming process's id: an earlier run's files, kept until the new run writes


class OutputDirError(RuntimeError):
    """An output folder that this run may not write into."""


def recipe_hash(recipe) -> str:
    return hashlib.sha256(yaml.safe_dump(recipe.training_dict(), sort_keys=True).encode()).hexdigest()[:16]


def run_inputs(recipe) -> dict[str, str]:
    """The recipe keys naming local paths that the run reads (they must lie outside its output folder)."""
    keys = ("tokenizer", "model", "train_file", "validation_file", "dataset")
    return {key: value for key in keys if (value := getattr(recipe, key)) and Path(value).exists()}


def _check_path(value: str, argument: str) -> Path:
    """`value` resolved, unless it is empty, a file (or below one) or the working folder."""
    if not str(value).strip():
        raise OutputDirError(f"{argument} is empty: give a folder for the run's files (it is created when missing), "
                             f"e.g. outputs/run")
    for candidate in (Path(value), *Path(value).parents):
        if candidate.exists() and not candidate.is_dir():
            raise OutputDirError(f"{argument}: {candidate} is a file, not a folder; give a folder path (it is created "
                                 f"when missing)")
    folder = Path(value).resolve()
    if folder == Path.cwd().resolve():
        raise OutputDirError(f"{argument} is the working folder {folder}: the output is written into subfolders and "
                             f"files of it; give a folder of its own, e.g. outputs/run")
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputDirError(f"{argument}: {existing} is not writable by this user, so nothing could be saved "
                             f"there; give a folder you can write to")
    return folder


def check_output_dir(value: str, inputs: dict[str, str] | None = None,
                     argument: str = "recipe key 'output_dir'") -> Path:
    """The resolved run folder, or an `OutputDirError` naming why the run may not write there (module docstring);
    writes nothing."""
    folder = _check_path(value, argument)
    for key, path in (inputs or {}).items():
        resolved = Path(path).resolve()
        if resolved == folder or folder in resolved.parents:
            raise OutputDirError(f"{argument} {folder} holds an input of this run (recipe key {key!r}: {path}); the "
                                 f"output folder must lie outside every input, so that nothing the run reads is "
                                 f"ever replaced or deleted: choose another folder")
    if (folder / "config.json").is_file():
        raise OutputDirError(f"{argument} {folder} is a saved model folder (it holds config.json); a run publishes its "
                             f"own model into <output_dir>/model and never writes over a model: choose a new folder")
    return folder


# ----------------------------------------------------------------------------- manifests

def _fingerprint(path: Path) -> list:
    """[size, hash of the first and last `_SAMPLE` bytes]: what a manifest records of a file."""
    size, digest = path.stat().st_size, hashlib.sha256()
    with open(path, "rb") as handle:
        digest.update(handle.read(_SAMPLE))
        if size > _SAMPLE:
            handle.seek(max(_SAMPLE, size - _SAMPLE))
            digest.update(handle.read())
    return [size, digest.hexdigest()[:16]]


def _listing(folder: Path, name: str) -> dict[str, list]:
    """Every file at or under `folder/name`, by its path relative to `folder`, with its fingerprint (its size alone
    for `APPENDED` parts and for checkpoint files, which are owned by their names: `_checkpoint_file`)."""
    root = folder / name
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    listing = {}
    for path in paths:
        relative = path.relative_to(folder).as_posix()
        by_size = name in APPENDED or _checkpoint_file(relative)
        listing[relative] = [path.stat().st_size] if by_size else _fingerprint(path)
    return listing


def _under(relative: str, name: str) -> bool:
    return relative == name or relative.startswith(name + "/")


def _unchanged(folder: Path, name: str, wrote: dict[str, list]) -> bool:
    """Whether `folder/name` holds only files that `wrote` records, each as recorded (an `APPENDED` one may have
    grown), or files of the checkpoint folders a save names itself (`_checkpoint_file`); recorded files may have
    gone (a checkpoint rotated out)."""
    for relative, now in _listing(folder, name).items():
        before = wrote.get(relative)
        if _checkpoint_file(relative):
            continue
        if before is None or (now[0] < before[0] if name in APPENDED else now != before):
            return False
    return True


def _checkpoint_file(relative: str) -> bool:
    """A file inside a folder that a checkpoint save names (`step-N`, or its `.tmp-` / `.old-` / `.del-` stages):
    the run's own even when a kill came between the write and its record. A checkpoint's integrity is its state
    file's business (`checkpoints.verify_checkpoint`), not the manifest's."""
    parts = relative.split("/")
    return (len(parts) > 2 and parts[0] == "checkpoints"
            and parts[1].startswith((CHECKPOINT_PREFIX, TMP, OLD, DELETING)))


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: dict) -> None:
    """Write `data` to `path` through a temporary file and a rename: a reader never sees half a record."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def _delete(path: Path, why: str) -> None:
    print(f"{why}: deleting {path}", flush=True)
    shutil.rmtree(path) if path.is_dir() else path.unlink()


# ----------------------------------------------------------------------------- runs

def claim(recipe) -> Path:
    """Check `recipe.output_dir` (module docstring), take its lock and start the run record; idempotent for one run
    (the same recipe object). A refusal deletes nothing and leaves no file behind. Returns the folder."""
    if claimed(recipe):
        return Path(recipe.output_dir).resolve()
    folder = check_output_dir(recipe.output_dir, run_inputs(recipe))
    existed = folder.is_dir()
    _take_lock(folder)
    try:
        _recover_set_aside(folder)
        record = _read_json(folder / RECORD) if existed else None
        if recipe.resume_from_checkpoint:
            if record is None:
                _write_record(folder, recipe)  # a folder without a record: the resume starts one
            else:
                _refuse_foreign(folder, record)  # a resume must not adopt files it did not write
        else:
            _clear_for_new_run(folder, record, recipe.overwrite_output_dir)
            _write_record(folder, recipe)
    except BaseException:
        _release_lock(folder)
        if not existed:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    _claims[folder] = recipe
    _fresh[folder] = None if not existed else record is None or not recipe.resume_from_checkpoint
    return folder


def claimed(recipe) -> bool:
    """Whether this process holds the claim of `recipe` (the same recipe object) on its output folder."""
    return bool(recipe.output_dir) and _claims.get(Path(recipe.output_dir).resolve()) is recipe


def withdraw(recipe) -> None:
    """Undo the claim of a run that stopped before writing anything (refused after `claim`): the record it started
    and the lock go, and the folder when the claim created it, so the refusal leaves no file behind. A run that wrote
    something, or resumed into a record it did not start, keeps its record and lock (its files are its own). A run
    whose claim set an earlier run's files aside and that never trained deletes what it wrote and puts them back."""
    if not claimed(recipe):
        return
    folder = Path(recipe.output_dir).resolve()
    record = _read_json(folder / RECORD) or {}
    aside = _set_aside.pop(folder, None)  # still set aside: the run never trained (`record_written` drops them)
    if aside is not None:
        _undo(folder, record, aside)
        release(recipe)
        return
    fresh = _fresh.get(folder)
    if fresh is False or record.get("wrote") or record.get("resumes"):
        return
    (folder / RECORD).unlink(missing_ok=True)
    release(recipe)
    if fresh is None and not any(folder.iterdir()):
        folder.rmdir()


def _refuse_foreign(folder: Path, record: dict | None) -> list[str]:
    """The paths of `RUN_FILES` present in `folder`, or an `OutputDirError` naming those that the record's manifest
    does not account for (module docstring)."""
    present = [name for name in RUN_FILES if (folder / name).exists()]
    wrote = (record or {}).get("wrote")
    wrote = wrote if isinstance(wrote, dict) else None
    foreign = [name for name in present if wrote is None or not _unchanged(folder, name, wrote)]
    if (folder / RECORD).exists() and wrote is None:
        foreign.insert(0, RECORD)  # another program's run.json, or one from before records listed their files
    if foreign:
        raise OutputDirError(
            f"output_dir {folder} holds {', '.join(foreign)}, which no Lineage run recorded writing there (or which "
            f"changed since): a run writes these paths itself and deletes only files its own record lists; move "
            f"them away or choose another --output_dir")
    return present


def _clear_for_new_run(folder: Path, record: dict | None, overwrite: bool) -> None:
    """Delete what an earlier run recorded writing here, when it may be (module docstring); refuse otherwise."""
    present = _refuse_foreign(folder, record)
    if any(name in WORK for name in present) and not overwrite:
        raise OutputDirError(
            f"output_dir {folder} holds another run's files ({', '.join([RECORD, *present])}); to continue that run "
            f"pass --resume_from_checkpoint latest, to delete its files and start over pass --overwrite_output_dir "
            f"true, or choose another --output_dir")
    if any(name in WORK for name in present):  # deleted once the new run trains, put back if it stops first
        aside = folder / f"{ASIDE}{os.getpid()}"
        aside.mkdir()
        for name in [RECORD, *present]:
            if (folder / name).exists():
                (folder / name).rename(aside / name)
        print(f"overwrite_output_dir: set aside {', '.join(present)} of {folder}, deleted once this run trains, put "
              f"back if it stops before", flush=True)
        _set_aside[folder] = aside
        return
    for name in present:
        _delete(folder / name, "a run that stopped before training (no checkpoint, log or model)")


def _trained(record: dict) -> bool:
    """Whether a run's manifest lists a file of its work (checkpoints, log, model, adapter), not just its tokenizer."""
    return any(_under(path, name) for path in record.get("wrote", {}) for name in WORK)


def _undo(folder: Path, record: dict, aside: Path) -> None:
    """Delete what a run that never trained wrote (its manifest's files and record) and put back the earlier run's
    files its claim set aside."""
    for name in RUN_FILES:
        if any(_under(path, name) for path in record.get("wrote", {})) and (folder / name).exists():
            _delete(folder / name, "a run stopped before training")
    (folder / RECORD).unlink(missing_ok=True)
    for path in aside.iterdir():
        path.rename(folder / path.name)
    aside.rmdir()
    print(f"output_dir {folder}: put back the earlier run's files, as the overwriting run never trained", flush=True)


def _drop_set_aside(folder: Path) -> None:
    """The run trains (or has published): the earlier run's files its claim set aside are deleted now."""
    aside = _set_aside.pop(folder, None)
    if aside is not None and aside.exists():
        _delete(aside, "overwrite_output_dir")


def _recover_set_aside(folder: Path) -> None:
    """Files set aside by a claim whose process is gone (killed before it trained): put back, or deleted when that
    run had trained (its manifest replaced theirs)."""
    for aside in folder.glob(f"{ASIDE}*"):
        pid = aside.name.removeprefix(ASIDE)
        if not pid.isdigit() or process_alive(int(pid)):
            continue
        record = _read_json(folder / RECORD) or {}
        if _trained(record):
            _delete(aside, "an earlier run's files set aside by an overwriting run that has trained since")
        else:
            _undo(folder, record, aside)


def record_written(recipe, *names: str) -> None:
    """Record in the run's manifest every file now at or under `<output_dir>/<name>` (the parts `names` of
    `RUN_FILES` that the run has just written), replacing what was recorded for them; main process only."""
    folder = Path(recipe.output_dir).resolve()
    record = _read_json(folder / RECORD) or {}
    wrote = {k: v for k, v in record.get("wrote", {}).items() if not any(_under(k, name) for name in names)}
    for name in names:
        if (folder / name).exists():
            wrote.update(_listing(folder, name))
    record["wrote"] = dict(sorted(wrote.items()))
    _write_json(folder / RECORD, record)
    if _trained(record):
        _drop_set_aside(folder)


def note_resume(recipe, checkpoint: Path, step: int, changed: dict) -> None:
    """Add an accepted resume (its checkpoint, step, command and the recipe keys changed since:
    {key: [before, now]}) to the record."""
    path = Path(recipe.output_dir).resolve() / RECORD
    record = _read_json(path) or {}
    record.setdefault("resumes", []).append({"checkpoint": str(checkpoint), "step": step, "changed": changed,
                                             "time": _now(), "pid": os.getpid(), "command": sys.argv})
    _write_json(path, record)


def release(recipe) -> None:
    """Give the folder's lock back (the run has published its model)."""
    folder = Path(recipe.output_dir).resolve()
    _drop_set_aside(folder)
    _claims.pop(folder, None)
    _fresh.pop(folder, None)
    _release_lock(folder)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _write_record(folder: Path, recipe) -> None:
    _write_json(folder / RECORD, {"recipe_sha256": recipe_hash(recipe), "started": _now(), "pid": os.getpid(),
                                  "host": socket.gethostname(), "command": sys.argv, "resumes": [], "wrote": {}})


# ----------------------------------------------------------------------------- other commands' folders

def check_writer_output(value: str, command: str, argument: str = "--output_dir") -> Path:
    """The resolved folder that `command` may write (new, empty, or holding only what its own manifest records,
    unchanged), or an `OutputDirError` naming what is in the way; writes nothing."""
    folder = _check_path(value, argument)
    if not folder.is_dir() or not any(folder.iterdir()):
        return folder
    own = _read_json(folder / OUTPUT_RECORD) or {}
    wrote = own.get("wrote") if own.get("command") == command else None
    others = [p.name for p in sorted(folder.iterdir())
              if p.name != OUTPUT_RECORD and (wrote is None or not _unchanged(folder, p.name, wrote))]
    if wrote is None or others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise OutputDirError(
            f"{argument} {folder} is not empty and holds {shown}, which {command} did not write there (or which "
            f"changed since): {command} writes into a new or empty folder, or replaces its own earlier output; choose "
            f"another folder")
    return folder


@contextmanager
def staged_output(folder: Path, command: str | None = None) -> Iterator[Path]:
    """A temporary folder beside `folder` to write into; when the block completes it is recorded as `command`'s
    output (`OUTPUT_RECORD`; None: a run's part, which the run's own manifest records) and moved into place,
    replacing `folder` (checked by `check_writer_output` or, for a run, `claim`); when it raises, it is removed and
    `folder` stays as it was."""
    with staged(folder) as staging:
        yield staging
        if command is not None:
            wrote = {k: v for p in staging.iterdir() for k, v in _listing(staging, p.name).items()}
            _write_json(staging / OUTPUT_RECORD, {"command": command, "wrote": wrote})


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
            if host == mine["host"] and isinstance(pid, int) and not process_alive(pid):
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


__all__ = ["LOCK", "OUTPUT_RECORD", "OutputDirError", "RECORD", "RUN_FILES", "check_output_dir", "check_writer_output",
           "claim", "claimed", "note_resume", "recipe_hash", "record_written", "release", "run_inputs", "staged_output",
           "withdraw"]
