"""Evaluations score the deterministic and the stochastic policy; the stochastic one leaves the
training that follows unchanged, and runs logged before its columns resume in their own layout.
``stop_when_solved`` ends a run after a streak of solved evaluations, and the run counts as finished."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import train_rl
from agents import MemoryPPO
from experiments.run_dir import EVAL_COLUMNS, EvalLog
from experiments.studies.runs import FINISHED, Run
from tests.test_cli import REPO, TINY


def _train(directory: Path, *argv: str) -> Path:
    assert train_rl.main([*TINY, "-n", "256", "--log-dir", str(directory), "--threads", "1", *argv]) == 0
    (run,) = directory.glob("TMaze-v0__*")
    return run


def test_evaluations_record_the_deterministic_and_the_stochastic_policy(tmp_path: Path):
    run = _train(tmp_path)
    rows = list(csv.DictReader((run / "evaluations.csv").open()))
    assert list(rows[0]) == EVAL_COLUMNS and [int(r["timesteps"]) for r in rows] == [64, 128, 192, 256]
    for row in rows:
        assert 0.0 <= float(row["stochastic_success_rate"]) <= 1.0
        assert -1.0 <= float(row["stochastic_mean_return"]) <= 1.0
    summary = json.loads((run / "summary.json").read_text())
    assert 0.0 <= summary["final_stochastic_success_rate"] <= 1.0


def test_the_stochastic_evaluation_leaves_training_unchanged(tmp_path: Path):
    """Sampling actions draws from torch's random state, which the rollouts draw from too: without
    the fork, every evaluation would change the actions of the training after it."""
    evaluated = _train(tmp_path / "evaluated")
    unevaluated = _train(tmp_path / "unevaluated", "--eval-freq", "0")
    assert len(list(csv.DictReader((evaluated / "evaluations.csv").open()))) == 4
    assert not (unevaluated / "evaluations.csv").exists()
    first, second = (MemoryPPO.load(run / "model.zip", device="cpu").policy.state_dict()
                     for run in (evaluated, unevaluated))
    assert all(torch.equal(first[key], second[key]) for key in first)


def test_a_run_logged_before_the_stochastic_columns_keeps_its_layout(tmp_path: Path):
    path = tmp_path / "evaluations.csv"
    old_columns = EVAL_COLUMNS[:6]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, old_columns)
        writer.writeheader()
        writer.writerow(dict.fromkeys(old_columns, 1))
    log = EvalLog(path)
    log.append({**dict.fromkeys(EVAL_COLUMNS, 2), "timesteps": 3})
    log.truncate_after(2)
    log.append({**dict.fromkeys(EVAL_COLUMNS, 4), "timesteps": 5})
    assert path.read_text().splitlines() == [",".join(old_columns), "1,1,1,1,1,1", "5,4,4,4,4,4"]


@pytest.mark.slow
def test_the_evaluation_modes_notebook_scores_every_checkpoint_with_both_policies(tmp_path: Path):
    run = _train(tmp_path / "runs", "-p", "keep_checkpoints=0")
    command = [sys.executable, str(REPO / "notebooks" / "evaluation_modes.py"), str(tmp_path / "runs"),
               "--name", "modes", "--episodes", "4", "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=REPO, capture_output=True)
    (result,) = json.loads((tmp_path / "modes.json").read_text())["runs"]
    assert result["run"] == run.name and [r["steps"] for r in result["checkpoints"]] == [64, 128, 192, 256]
    for row in result["checkpoints"]:
        assert 0.0 <= row["deterministic_success"] <= 1.0 and 0.0 <= row["stochastic_success"] <= 1.0
        assert 1 <= row["deterministic_length"] <= 1000 and 1 <= row["stochastic_length"] <= 1000
    assert f"| {run.name} | 4 |" in (tmp_path / "modes.md").read_text()


def test_stop_when_solved_ends_the_run_after_a_streak_of_solved_evaluations(tmp_path: Path):
    """With a threshold of 0 every evaluation counts as solved: two in a row stop a 256-step run
    at 128 steps, whose summary says so and which a study counts as finished, not interrupted; a streak
    of five is never reached in its four evaluations."""
    run = _train(tmp_path / "stopped", "--stop-when-solved", "2", "-p", "success_threshold=0.0")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 128 and summary["stopped_solved"] is True
    assert [int(r["timesteps"]) for r in csv.DictReader((run / "evaluations.csv").open())] == [64, 128]
    assert (run / "checkpoints" / "model_128_steps.zip").exists() and (run / "model.zip").exists()
    assert Run(run).state(256) == FINISHED
    unsolved = _train(tmp_path / "unsolved", "--stop-when-solved", "5", "-p", "success_threshold=0.0")  # 4 evaluations
    summary = json.loads((unsolved / "summary.json").read_text())
    assert summary["env_steps"] == 256 and summary["stopped_solved"] is False
