"""``notebooks/minigrid_starts.py``: success by start position of a trained MiniGrid-Memory run. Its
attribution rests on SB3's auto-reset: after the step that ends an episode, the env already stands at
the next episode's start (the hallway row, facing the split), which is pinned here too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import train_rl
from envs.registry import make_vec_env
from tests.test_cli import REPO

S9 = {"obs": "symbolic", "agent_view_size": 3, "max_episode_steps": 12, "actions": "navigation"}


def test_after_an_episode_ends_the_env_stands_at_the_next_start():
    env = make_vec_env("MiniGrid-MemoryS9-v0", n_envs=4, seed=0, **S9)
    env.reset()
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(60):
        _, _, dones, _ = env.step(rng.integers(0, 3, size=4))
        for i in np.flatnonzero(dones):
            x, y = env.get_attr("agent_pos")[i]
            assert 1 <= x <= 6 and y == 4 and env.get_attr("agent_dir")[i] == 0
            ended += 1
    assert ended >= 4


def train_a_small_run(log_dir: Path, n_envs: int, steps: int) -> None:
    """A tiny GTrXL run on the study's MiniGrid set-up (one PPO update of 16 steps per env)."""
    argv = ["--env", "MiniGrid-MemoryS9-v0", "--env-kwargs", *(f"{k}={v}" for k, v in S9.items()),
            "--n-envs", str(n_envs), "-n", str(steps), "--eval-freq", "0", "--n-eval-episodes", "2",
            "--checkpoint-freq", "0", "--threads", "1", "--log-dir", str(log_dir),
            "-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.n_epochs=1", "ppo.segment_length=4",
            "gtrxl.memory_length=4", "gtrxl.d_model=16", "gtrxl.n_heads=2", "gtrxl.n_layers=1", "n_eval_envs=2"]
    assert train_rl.main(argv) == 0


@pytest.mark.slow
def test_the_benchmark_reports_success_per_start(tmp_path: Path):
    train_a_small_run(tmp_path / "runs", n_envs=4, steps=64)
    command = [sys.executable, str(REPO / "notebooks" / "minigrid_starts.py"), str(tmp_path / "runs"),
               "--name", "starts", "--episodes", "16", "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=REPO, capture_output=True)
    (run,) = json.loads((tmp_path / "starts.json").read_text())["runs"]
    assert set(run["starts"]) <= {str(x) for x in range(1, 7)}
    assert sum(outcome["episodes"] for outcome in run["starts"].values()) >= 16
    assert all(0.0 <= outcome["success"] <= 1.0 and 1 <= outcome["mean_length"] <= 12
               for outcome in run["starts"].values())
    assert "| x = " in (tmp_path / "starts.md").read_text()


@pytest.mark.slow
def test_the_trace_shows_every_step_of_an_episode(tmp_path: Path):
    """``notebooks/minigrid_trace.py``: one ``x,y/heading:action`` per step from a start (facing east in the
    hallway), positions inside the grid, headings and actions in range, and the episode's end within the
    12-step limit."""
    train_a_small_run(tmp_path / "runs", n_envs=2, steps=32)
    (model,) = (tmp_path / "runs").glob("*/model.zip")
    command = [sys.executable, str(REPO / "notebooks" / "minigrid_trace.py"), str(model), "--name", "trace",
               "--seeds", "3", "--steps", "20", "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=REPO, capture_output=True)
    (episode,) = json.loads((tmp_path / "trace.json").read_text())["episodes"]
    first = episode["moves"][0]
    assert first.startswith(("1,4/0:", "2,4/0:", "3,4/0:", "4,4/0:", "5,4/0:", "6,4/0:")), first  # a start
    for move in episode["moves"]:
        position, action = move.split(":")
        x, y_heading = position.split(",")
        y, heading = y_heading.split("/")
        assert 1 <= int(x) <= 7 and 1 <= int(y) <= 7 and 0 <= int(heading) <= 3 and 0 <= int(action) <= 2
    assert episode["reward"] is not None and len(episode["moves"]) <= 12
