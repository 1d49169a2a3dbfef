"""Runs lost with their worker are retried while the others go on: the launchers' retry logic, a
local worker killed with SIGKILL mid-study, and a node of a two-node Ray cluster killed mid-study.
Each retried run resumes from its last checkpoint, so it loses at most one checkpoint interval, and
its evaluations stay strictly increasing."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_cli import REPO, TINY
from test_study import alive

import experiments.studies.study
import train_rl
from envs.atomic import WriteError
from experiments.cli import train as train_cli
from experiments.studies.launchers import LauncherError, Lost, launch
from experiments.studies.runs import FAILED, FINISHED, RUNNING, Run, write_status
from experiments.studies.study import RunTask, plan, wait_for_lost_worker

CHECKPOINT = 64  # TINY's --checkpoint-freq and --eval-freq


def die_on_odd(item: int) -> int:
    """A worker function that kills its own process (SIGKILL) for odd items and doubles the others."""
    if item % 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return 2 * item


@pytest.mark.slow
def test_a_lost_local_worker_is_retried_while_the_others_finish():
    """Item 1 kills its worker: it is renewed (+1, so even) and runs again in a new worker; item 3
    always dies (renewed +2, still odd) and is given up after max_retries; item 0 finishes."""
    events = [e for e in launch(die_on_odd, [0, 1, 3], "local", workers=1, poll=1, max_retries=1,
                                renew=lambda item: item + 1 if item == 1 else item + 2) if e is not None]
    assert [(i, r) for i, r in events if not isinstance(r, Lost)] == [(0, 0), (1, 4)]
    losses = [(i, lost.losses, lost.retried) for i, lost in events if isinstance(lost, Lost)]
    assert losses == [(1, 1, True), (2, 1, True), (2, 2, False)]
    assert all("killed by SIGKILL" in lost.reason for _, lost in events if isinstance(lost, Lost))


def fill_the_disk(item: int) -> int:
    """A worker function whose write fails as on a full disk, and one whose code fails."""
    if item:
        raise WriteError(28, "No space left on device", f"/runs/{item}/status.json")
    raise ValueError("a bug")


def test_a_full_disk_in_a_worker_is_raised_as_itself_and_a_bug_names_its_item():
    """A machine fault in a worker reaches the command as the same `WriteError`, so a study prints the line a single
    run prints (mutation caught: `item 1 raised in its worker: WriteError: cannot write …`)."""
    with pytest.raises(WriteError) as raised:
        list(launch(fill_the_disk, [1], "local", workers=1, poll=1, max_retries=0))
    assert str(raised.value) == "cannot write '/runs/1/status.json': [Errno 28] No space left on device"
    with pytest.raises(LauncherError, match=r"^item 0 raised in its worker: ValueError: a bug$"):
        list(launch(fill_the_disk, [0], "local", workers=1, poll=1, max_retries=0))


def test_ray_is_imported_only_by_the_ray_launcher():
    """``--help`` (every module of the CLI, the launchers and studies included) never imports Ray
    (in a fresh interpreter: the Ray test imports it in this one)."""
    code = ("import contextlib, io, sys, train_rl\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    train_rl.main(['study', 'x.yaml', '--help'])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'ray'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_retry_waits_for_the_lost_worker_of_its_session(tmp_path):
    """The retry does not start while the process that status.json names (same session and host) lives."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    write_status(tmp_path, RUNNING, session="s")
    status = json.loads((tmp_path / "status.json").read_text())
    (tmp_path / "status.json").write_text(json.dumps({**status, "pid": sleeper.pid}))
    started = time.monotonic()
    reaper = threading.Thread(target=sleeper.wait, daemon=True)  # reap it, as a Ray node's init would
    reaper.start()
    wait_for_lost_worker(tmp_path, "s", timeout=30)
    assert time.monotonic() - started >= 1.0
    reaper.join(timeout=5)  # `poll()` here would race the reaper for Popen's wait lock
    assert sleeper.returncode == 0
    started = time.monotonic()
    wait_for_lost_worker(tmp_path, "another session", timeout=30)  # an earlier session's pid: no wait
    assert time.monotonic() - started < 0.5


def _steps(run: Path) -> list[int]:
    with (run / "evaluations.csv").open(newline="") as f:
        return [int(float(row["timesteps"])) for row in csv.DictReader(f)]


def _kill_when_checkpointed(runs: list[Path], pick, kill, found: dict, done: threading.Event) -> threading.Thread:
    """A thread that waits for a run that ``pick(pid)`` accepts to have two checkpoints and no
    summary, then calls ``kill(pid)`` and records in ``found`` the run, its worker and its latest
    checkpoint once that worker is dead (the most a retry can resume from). It watches until ``done`` is set
    (the study has returned), however long a loaded machine takes to start the runs."""

    def watch() -> None:
        while not done.is_set() and "run" not in found:
            for run in runs:
                status, checkpoint = Run(run).status, Run(run).checkpoint()
                if (status and status["state"] == "running" and checkpoint and checkpoint[1] >= 2 * CHECKPOINT
                        and not (run / "summary.json").exists() and pick(status["pid"])):
                    kill(status["pid"])
                    while alive(status["pid"]):
                        time.sleep(0.01)
                    found.update(run=run, pid=status["pid"], checkpoint=Run(run).checkpoint()[1])
                    break
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _check_study(study: Path, total: int, found: dict, err: str) -> None:
    """Every run finished with one evaluation per interval, in order; only the lost run was
    retried, from the checkpoint it had when its worker died (so it lost less than one checkpoint
    interval); the report counts the retry."""
    runs = sorted(study.glob("TMaze-v0__ppo-*"))
    lost = found["run"]
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        status = json.loads((run / "status.json").read_text())
        assert Run(run).state(total) == FINISHED and summary["env_steps"] == total
        assert _steps(run) == list(range(CHECKPOINT, total + 1, CHECKPOINT)), run.name  # strictly increasing
        assert status["retries"] == (1 if run == lost else 0), run.name
        assert summary["resumed_from"] == (found["checkpoint"] if run == lost else None), run.name
    assert f"lost {lost.name}: " in err and f"retry 1 of 3, from its checkpoint at {found['checkpoint']} steps" in err
    report = (study / "report.md").read_text()
    assert f"{len(runs)} runs: {len(runs)} finished. 1 retry of 1 run after a lost worker or node" in report
    assert f"| {lost.name} | finished | {total} | 1 |" in report


def test_a_local_worker_killed_mid_study_is_retried_from_its_checkpoint(tmp_path, capsys):
    """SIGKILL the worker of one of two runs after its second checkpoint: that run resumes from the
    checkpoint it had in a new worker; the other run is not disturbed."""
    total = 512
    study = tmp_path / "TMaze-v0__ppo"
    runs = [study / f"TMaze-v0__ppo-gtrxl__{seed}" for seed in (0, 1)]
    found: dict = {}
    done = threading.Event()
    watcher = _kill_when_checkpointed(runs[:1], lambda pid: True, lambda pid: os.kill(pid, signal.SIGKILL), found,
                                      done)
    argv = [*TINY, "--log-dir", str(tmp_path), "-n", str(total), "--seed", "0", "1", "--workers", "2",
            "--reps", "100"]
    assert train_rl.main(argv) == 0
    done.set()
    watcher.join(5)
    assert found, "the run finished before its worker could be killed"
    err = capsys.readouterr().err
    assert f"worker process {found['pid']} died (killed by SIGKILL)" in err
    _check_study(study, total, found, err)


def test_a_run_lost_too_often_is_recorded_as_failed(tmp_path, monkeypatch, capsys):
    """A run lost once more than --max-retries allows is recorded as failed (exit 3) with the reason
    and its retries, while the other run finishes; --retry-failed reruns it."""

    def lose_the_first(fn, items, *args, max_retries, **kwargs):
        yield 0, Lost("worker process 7 died (killed by SIGKILL)", max_retries + 1, retried=False)
        yield from ((i, fn(item)) for i, item in enumerate(items) if i)

    monkeypatch.setattr(experiments.studies.study, "launch", lose_the_first)
    argv = [*TINY, "--log-dir", str(tmp_path), "-n", "64", "--eval-freq", "0", "--seed", "0", "1", "--reps", "100",
            "--max-retries", "2"]
    assert train_rl.main(argv) == 3
    study = tmp_path / "TMaze-v0__ppo"
    lost, other = Run(study / "TMaze-v0__ppo-gtrxl__0"), Run(study / "TMaze-v0__ppo-gtrxl__1")
    assert lost.state() == FAILED and other.state() == FINISHED and lost.status["retries"] == 2
    assert lost.error() == "its worker was lost 3 times, last: worker process 7 died (killed by SIGKILL)"
    assert ("lost TMaze-v0__ppo-gtrxl__0: worker process 7 died (killed by SIGKILL); given up after 2 retries "
            "(--max-retries)") in capsys.readouterr().err
    report = (study / "report.md").read_text()
    assert "2 runs: 1 finished, 1 failed. 2 retries of 1 run after a lost worker or node" in report
    assert "| TMaze-v0__ppo-gtrxl__0 | failed | 0 | 2 |" in report
    configs = train_cli.grid_from_args(train_cli.make_parser().parse_args(argv)).study_configs()[1]
    assert [(t.config.seed, t.resume, t.retries) for t in plan(configs, "s", retry_failed=True)[0]] == [(0, False, 2)]
    # a retry resumes from the run's checkpoint when it has one now (the finished run has), and counts itself
    assert RunTask(configs[1], False, "s").after_loss() == RunTask(configs[1], True, "s", retries=1)


@pytest.fixture
def two_node_ray_cluster(monkeypatch):
    """A Ray cluster of two nodes on this machine: a head with three CPUs, a worker node with one (so
    a 4-run study puts exactly one run on the worker node); no dashboard, no usage stats, and a
    node declared dead 1 s after it stops answering. (Ray binds the machine's own address, not
    127.0.0.1: a driver rewrites a loopback address to it. Nothing leaves the machine.)"""
    ray_cluster_utils = pytest.importorskip("ray.cluster_utils")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(Path(__file__).parents[1]),
                                                                   os.environ.get("PYTHONPATH")])))
    cluster = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 3, "include_dashboard": False,
        "_system_config": {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                           "health_check_failure_threshold": 2}})
    worker = cluster.add_node(num_cpus=1)
    try:
        yield cluster, worker
    finally:
        cluster.shutdown()


@pytest.mark.slow  # long: run by make test-slow
def test_a_ray_node_lost_mid_study_costs_one_run_one_checkpoint_interval(tmp_path, capsys, two_node_ray_cluster):
    """Kill the worker node's raylet (SIGKILL) while its run trains: that run resumes on the head
    from its last checkpoint; the three runs on the head are not disturbed."""
    cluster, node = two_node_ray_cluster
    raylet = node.all_processes["raylet"][0].process.pid

    def on_worker_node(pid: int) -> bool:  # Ray's workers are children of their node's raylet
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] == str(raylet)
        except FileNotFoundError:
            return False

    total = 4096  # long enough that the killed run is still training when its node goes (one-layer default)
    study = tmp_path / "TMaze-v0__ppo"
    runs = [study / f"TMaze-v0__ppo-gtrxl__{seed}" for seed in range(4)]
    found: dict = {}
    done = threading.Event()
    watcher = _kill_when_checkpointed(runs, on_worker_node, lambda pid: cluster.remove_node(node, False), found,
                                      done)
    argv = [*TINY, "--log-dir", str(tmp_path), "-n", str(total), "--seed", "0", "1", "2", "3", "--reps", "100",
            "--launcher", "ray", "--ray-address", cluster.address]
    assert train_rl.main(argv) == 0
    done.set()
    watcher.join(5)
    assert found, "the run on the worker node finished before the node could be killed"
    err = capsys.readouterr().err
    assert "NodeDiedError" in err or "WorkerCrashedError" in err  # Ray's word for the loss: the node, or its worker
    _check_study(study, total, found, err)
