"""Staging folders and locks in a cache that several machines share (`train.data.staging`): a machine sweeps only its
own dead processes' staging, and `exclusive` lets one process at a time through, leaving no lock file behind."""

import multiprocessing
import os
import subprocess
import sys
import time

from train.data import staging


def _hold(folder, log, seconds):
    with staging.exclusive(folder):
        with open(log, "a") as out:
            out.write(f"in {time.monotonic()}\n")
        time.sleep(seconds)
        with open(log, "a") as out:
            out.write(f"out {time.monotonic()}\n")


def test_exclusive_lets_one_process_through_at_a_time_and_leaves_no_lock_file(tmp_path):
    folder, log = tmp_path / "store", tmp_path / "log"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_hold, args=(folder, log, 0.2)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0] * 4
    events = [line.split()[0] for line in log.read_text().splitlines()]
    assert events == ["in", "out"] * 4  # never two inside at once
    assert list(tmp_path.iterdir()) == [log]  # no lock file left, no folder made


def test_a_machine_sweeps_its_own_dead_staging_and_keeps_another_machines(tmp_path):
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)
    ours = tmp_path / f"{staging.staging_name('a').replace(str(os.getpid()), str(gone))}x1"
    earlier = tmp_path / f".a.tmp-{gone}-x2"  # named before staging names carried the machine
    other = tmp_path / f".a.tmp-{gone}.0123abcd-x3"  # another machine's: its process may well run there
    alive = tmp_path / f"{staging.staging_name('a')}x4"
    for folder in (ours, earlier, other, alive):
        folder.mkdir()
    assert staging.HOST in ours.name and staging.HOST != "0123abcd"
    staging.sweep_stale(tmp_path, "a")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([other.name, alive.name])
