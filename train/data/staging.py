"""Folders written whole or not at all: `staged(folder)` gives a folder beside `folder` to write into, moves it into
place when the block completes (the old `folder`, if any, is set aside first and deleted only once the new one is in
place) and deletes it when the block raises; the staging folders of processes that no longer run are swept first.
Used by the prepared store, the tokenizer cache and every command that writes a folder of its own (docs/training.md,
"Output folders"). Staging names carry the machine, so a cache that machines share keeps another machine's staging;
`exclusive(folder)` holds a lock beside a folder, for a writer that machines share (docs/scaling.md, "Several
machines")."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this machine still runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]  # names this machine in a shared cache


def staging_name(name: str) -> str:
    """The prefix of a staging folder or file for `name`, naming this process and its machine:
    `.<name>.tmp-<pid>.<host>-`."""
    return f".{name}.tmp-{os.getpid()}.{HOST}-"


def sweep_stale(parent: Path, name: str = "*") -> None:
    """Delete the staging folders and files of `name` (a glob pattern) under `parent` whose process on this machine
    no longer runs."""
    for stale in parent.glob(f".{name}.tmp-*-*"):
        pid, _, host = stale.name.rsplit("-", 2)[-2].partition(".")
        if host in ("", HOST) and pid.isdigit() and not process_alive(int(pid)):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


def current_umask() -> int:
    """This process's umask (set and set back: the only portable way to read it; restrictive in between)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def honour_umask(folder: Path) -> None:
    """Give `folder` and everything under it the modes this process's umask gives: a private temporary file or
    folder renamed into place keeps 0600 / 0700 otherwise (safetensors from 0.8 writes through one)."""
    mask = current_umask()
    for path in (folder, *folder.rglob("*")):
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


@contextmanager
def staged(folder: Path, sweep: str | None = None) -> Iterator[Path]:
    """A new folder beside `folder` to write into, which replaces `folder` when the block completes and is deleted
    when it raises. `sweep`: the names (a glob pattern) whose stale staging folders are deleted first."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(folder.parent, folder.name if sweep is None else sweep)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=staging_name(folder.name)))
    try:
        yield staging
        honour_umask(staging)  # mkdtemp's 0700 would stay on the folder it becomes
        if folder.exists():
            # named as a staging folder: swept once this process is gone, should it die between the two renames
            retired = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f"{staging_name(folder.name)}old"))
            folder.rename(retired / folder.name)
            staging.rename(folder)
            shutil.rmtree(retired)
        else:
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def exclusive(folder: Path) -> Iterator[None]:
    """Hold `folder`'s lock (`.<name>.lock` beside it) for the block: one process at a time, on any machine where the
    file system has locks. Without `fcntl` (Windows) the block runs unlocked."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    path = folder.parent / f".{folder.name}.lock"
    while True:
        handle = open(path, "a")
        if fcntl is None:
            break
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino:
                break  # still the lock's file: not one its last holder removed while this process waited
        except FileNotFoundError:
            pass
        handle.close()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # before the lock is released: a waiting process then takes a new file
        handle.close()


__all__ = ["HOST", "current_umask", "exclusive", "honour_umask", "process_alive", "staged", "staging_name",
           "sweep_stale"]
