"""How many worker processes a data step (reading files, tokenizing, preparing a store) uses: `num_proc` capped at
the work and at the cores this process may run on."""

import os

ROWS_PER_PROCESS = 20_000  # fewer rows are worked on in this process: starting others would cost more


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, where the system keeps one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def process_count(num_proc: int | None, rows: int, source: str = "the corpus", unit: str = "rows") -> int:
    """The processes that work on `rows` rows (or files: `unit`): `num_proc` capped, with a printed line, at the rows
    and at `usable_cores()`; None: one per core, at most one per `ROWS_PER_PROCESS` rows."""
    cores = usable_cores()
    if num_proc is None:
        return max(1, min(cores, rows // ROWS_PER_PROCESS))
    used = max(1, min(num_proc, rows, cores))
    if used < num_proc:
        print(f"{source}: num_proc {num_proc} capped at {used} process{'es' if used > 1 else ''} ({rows:,} {unit}, "
              f"{cores} CPU cores usable)", flush=True)
    return used


__all__ = ["ROWS_PER_PROCESS", "process_count", "usable_cores"]
