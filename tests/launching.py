"""Running a launch (`accelerate launch`, `torchrun`) from a test: `run_launch`, or `with_stacks` and `stop` for
launches run side by side. A module of its own, without
conftest's session setup, because the scripts those launches run import it too (through test_distributed)."""

import contextlib
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
LAUNCH_TIMEOUT = 600  # seconds


def run_launch(cmd: list[str], env: dict, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """Run a launch (`accelerate launch`, `torchrun`) to its end; past LAUNCH_TIMEOUT it is stopped (`stop`) and the
    test fails with its output. A hang so says where it hung and leaves no process running beside the tests after
    it."""
    with subprocess.Popen(cmd, cwd=cwd, env=with_stacks(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as launch:
        try:
            stdout, stderr = launch.communicate(timeout=LAUNCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            stop(launch)
            stdout, stderr = launch.communicate()
            pytest.fail(f"the launch ran past {LAUNCH_TIMEOUT} s and was stopped: {' '.join(cmd)}\n"
                        f"stdout:\n{stdout[-6000:]}\nstderr:\n{stderr[-20000:]}")
    return subprocess.CompletedProcess(cmd, launch.returncode, stdout, stderr)


def with_stacks(env: dict) -> dict:
    """`env` with Python's fault handler on, so that a process sent SIGABRT writes its threads' stacks first."""
    return {**env, "PYTHONFAULTHANDLER": "1"}


def stop(launch: subprocess.Popen) -> None:
    """Send SIGABRT to the launch's workers, which the launcher starts in sessions of their own (each writes its
    stacks, given `with_stacks`), then kill every process of the launch."""
    if launch.poll() is not None:  # it ended (with its workers)
        return
    launcher = psutil.Process(launch.pid)
    processes = launcher.children(recursive=True)
    for process in processes:
        process.send_signal(signal.SIGABRT)
    psutil.wait_procs(processes, timeout=10)
    for process in [*processes, launcher]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
