"""A launcher that cannot start and a study stopped by Ctrl-C: a Ray address with no cluster behind it ends
the study with one line before anything is created, and a Ctrl-C sent to the process group of a local study
(as a terminal sends it) ends it with status 130 and its one line, no worker's traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from test_cli import REPO
from test_study import STUDY, alive

from experiments.studies.runs import INTERRUPTED, Run


def study(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run `train_rl.py` with `argv` in a subprocess without RAY_ADDRESS (so `auto` means a cluster found here)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, str(REPO / "train_rl.py"), *argv], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=timeout)


def test_ray_address_auto_without_a_cluster_exits_1_with_one_line_before_creating_anything(tmp_path):
    pytest.importorskip("ray")
    log_dir = tmp_path / "runs"
    done = study([*STUDY, "--log-dir", str(log_dir), "--seed", "0", "1", "--launcher", "ray",
                  "--ray-address", "auto"], timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == ("error: cannot connect to the Ray cluster at --ray-address auto: "
                                                    "Could not find any running Ray instance")
    assert not log_dir.exists()


@pytest.mark.slow
def test_a_ray_address_nobody_answers_ends_within_a_minute_with_one_line(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as unused:  # a port that nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    log_dir = tmp_path / "runs"
    started = time.time()
    done = study([*STUDY, "--log-dir", str(log_dir), "--seed", "0", "1", "--launcher", "ray",
                  "--ray-address", f"127.0.0.1:{port}"], timeout=120)
    assert time.time() - started < 60
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"error: cannot connect to the Ray cluster at --ray-address 127.0.0.1:{port}: ")
    assert not log_dir.exists()


def test_ctrl_c_on_a_local_study_ends_it_with_130_and_one_line_no_worker_traceback(tmp_path):
    """SIGINT to the study's process group while its second run trains (two workers): the study says how to
    resume, its workers end quietly, and the interrupted runs are left to resume from their checkpoints."""
    total = 2048
    argv = [*STUDY, "--log-dir", str(tmp_path), "-n", str(total), "--backbone", "gtrxl", "--seed", "0", "1",
            "--workers", "2"]
    process = subprocess.Popen([sys.executable, str(REPO / "train_rl.py"), *argv], cwd=REPO, text=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    runs = [tmp_path / "TMaze-v0__ppo" / f"TMaze-v0__ppo-gtrxl__{seed}" for seed in (0, 1)]
    deadline = time.time() + 180
    while time.time() < deadline and not all(Run(run).checkpoint() for run in runs):
        assert process.poll() is None, process.stderr.read()
        time.sleep(0.05)
    workers = [json.loads((run / "status.json").read_text())["pid"] for run in runs]
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("study interrupted; rerun the same command to resume it")
    assert {Run(run).state(total) for run in runs} == {INTERRUPTED}, "a run finished before the interrupt"
    deadline = time.time() + 30
    while any(alive(worker) for worker in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(worker) for worker in workers), "a worker outlived the interrupted study"
