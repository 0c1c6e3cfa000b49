"""Content fingerprints of data files: a file edited in place with its size and modification time kept (`cp -p`,
`rsync -a` of an edited copy, `os.utime`) gets another fingerprint.

`file_fingerprint(path)` is `<size>:<hash>`, the hash over the size and the file's first and last MiB (a file of up
to 2 MiB is hashed whole), so it costs two reads of a MiB whatever the file's size; an edit of a larger file that
keeps its size and touches only the bytes between those two MiB is not seen. `files_digest(paths)` is one hash of
several files' fingerprints. They key what is kept for unchanged data: the whole-file checks (`file_bytes.once`), the
datasets cache of a loaded file and so the prepared store and tokenizer keyed by its fingerprint, and a checkpoint's
record of its data (`train.run.checkpoints`). docs/training.md ("Pretraining corpora: prepared once").
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable
from pathlib import Path

SPAN = 1 << 20  # bytes hashed at each end of a file
SETTLED_NS = 2 * 10**9  # a file changed more recently is read again: an edit in the same ctime tick keeps the key
_SEEN: dict[tuple, str] = {}  # this process's fingerprints by file identity and stat


def file_fingerprint(path: str | Path) -> str:
    """`<size>:<sha256 of the size, the first and the last SPAN bytes>` (the whole file up to 2 x SPAN), read once
    per process while the file's path, inode, size, mtime and ctime stay and its ctime is older than `SETTLED_NS`."""
    stat = os.stat(path)
    key = (SPAN, str(Path(path).resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key in _SEEN:
        return _SEEN[key]
    fingerprint = _read_fingerprint(path)
    if time.time_ns() - stat.st_ctime_ns > SETTLED_NS:  # a later edit cannot share its ctime tick
        _SEEN[key] = fingerprint
    return fingerprint


def _read_fingerprint(path: str | Path) -> str:
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        digest = hashlib.sha256(f"{size}\n".encode())
        digest.update(handle.read(SPAN))
        if size > SPAN:
            handle.seek(max(SPAN, size - SPAN))
            digest.update(handle.read(SPAN))
    return f"{size}:{digest.hexdigest()[:32]}"


def files_digest(paths: Iterable[str | Path]) -> str:
    """One hash of the fingerprints of `paths`, in their order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{file_fingerprint(path)}\n".encode())
    return digest.hexdigest()[:16]


__all__ = ["SPAN", "file_fingerprint", "files_digest"]
