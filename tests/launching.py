"""Running a launch (`accelerate launch`, `torchrun`) from a test: `run_launch`. A module of its own, without
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
    """Run a launch (`accelerate launch`, `torchrun`) to its end. Past LAUNCH_TIMEOUT its workers, which the launcher
    starts in sessions of their own, are sent SIGABRT, on which Python's fault handler writes each one's stacks to the
    output; then every process of the launch is killed and the test fails with that output. A hang so says where it
    hung and leaves no process running beside the tests after it."""
    env = {**env, "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as launch:
        try:
            stdout, stderr = launch.communicate(timeout=LAUNCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            launcher = psutil.Process(launch.pid)
            processes = launcher.children(recursive=True)
            for process in processes:
                process.send_signal(signal.SIGABRT)
            psutil.wait_procs(processes, timeout=10)
            for process in [*processes, launcher]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.kill()
            stdout, stderr = launch.communicate()
            pytest.fail(f"the launch ran past {LAUNCH_TIMEOUT} s and was stopped: {' '.join(cmd)}\n"
                        f"stdout:\n{stdout[-6000:]}\nstderr:\n{stderr[-20000:]}")
    return subprocess.CompletedProcess(cmd, launch.returncode, stdout, stderr)
