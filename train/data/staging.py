"""Folders written whole or not at all: `staged(folder)` gives a folder beside `folder` to write into, moves it into
place when the block completes (the old `folder`, if any, is set aside first and deleted only once the new one is in
place) and deletes it when the block raises; the staging folders of processes that no longer run are swept first.
Used by the prepared store, the tokenizer cache and every command that writes a folder of its own (docs/training.md,
"Output folders")."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this machine still runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def staging_name(name: str) -> str:
    """The prefix of a staging folder or file for `name`, naming this process: `.<name>.tmp-<pid>-`."""
    return f".{name}.tmp-{os.getpid()}-"


def sweep_stale(parent: Path, name: str = "*") -> None:
    """Delete the staging folders and files of `name` (a glob pattern; default: any name) under `parent` whose
    process no longer runs (a kill between creating one and moving it into place)."""
    for stale in parent.glob(f".{name}.tmp-*-*"):
        pid = stale.name.rsplit("-", 2)[-2]
        if pid.isdigit() and not process_alive(int(pid)):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


@contextmanager
def staged(folder: Path, sweep: str | None = None) -> Iterator[Path]:
    """A new folder beside `folder` to write into, which replaces `folder` when the block completes and is deleted
    when it raises, leaving `folder` as it was. `sweep`: the names (a glob pattern) whose stale staging folders are
    deleted first; by default `folder`'s own, "*" in a cache that is Lineage's alone."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(folder.parent, folder.name if sweep is None else sweep)
    staging = Path(tempfile.mkdtemp(dir=folder.parent, prefix=staging_name(folder.name)))
    try:
        yield staging
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


__all__ = ["process_alive", "staged", "staging_name", "sweep_stale"]
