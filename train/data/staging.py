"""Writing folders that a kill leaves either complete or absent: whether the process that staged one still runs.

Output folders a run owns: docs/training.md, "Run folders".
"""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this machine still runs (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


__all__ = ["process_alive"]
