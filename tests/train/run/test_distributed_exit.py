"""A process of a process group lets its threads finish before the interpreter finalizes (`distributed._grace_at_exit`):
gloo's worker threads take the GIL just after a collective returns, and a thread that asks for it during
finalization is ended, which killed processes with SIGABRT at the end of finished runs. The test's thread stands for
such a worker: it wakes after the process's last statement and must still run."""

import sys
import threading
import time
from pathlib import Path

import torch
from test_distributed import launch_two_processes

from train.run import distributed


def test_a_process_of_a_group_lets_its_threads_finish_before_the_interpreter_does(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    result = launch_two_processes(str(tmp_path), module=Path(__file__).stem)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.done", "rank1.done"], result.stderr[-4000:]


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    state = distributed.process_state()
    value = torch.ones(3)
    torch.distributed.all_reduce(value)
    assert value.tolist() == [2.0, 2.0, 2.0]

    def late() -> None:
        time.sleep(distributed.EXIT_GRACE_SECONDS / 4)
        (out / f"rank{state.process_index}.done").write_text("")

    threading.Thread(target=late, daemon=True).start()


if __name__ == "__main__":
    main(sys.argv[1:])
