"""Evaluations score the deterministic and the stochastic policy; the stochastic one leaves the
training that follows unchanged, and runs logged before its columns resume in their own layout.
``stop_when_solved`` ends a run after a streak of solved evaluations, and the run counts as finished."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import torch

import train_rl
from agents import MemoryPPO
from experiments.evaluation import EVAL_COLUMNS, EvalLog
from experiments.run_dir import FINISHED, Run
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


def test_the_evaluation_modes_benchmark_scores_every_checkpoint_with_both_policies(tmp_path: Path):
    run = _train(tmp_path / "runs", "-p", "keep_checkpoints=0")
    command = [sys.executable, str(REPO / "benchmarks" / "evaluation_modes.py"), str(tmp_path / "runs"),
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


def _final_lr(run: Path) -> float:
    """The optimizer's learning rate at the end of a run."""
    return MemoryPPO.load(run / "model.zip").policy.optimizer.param_groups[0]["lr"]


def test_solved_lr_factor_scales_the_learning_rate_from_the_first_solved_evaluation_on(tmp_path: Path):
    """Every evaluation is solved at a threshold of 0: from the first one on the optimizer trains at the
    factor times the schedule's rate, and a resumed run applies it again; never solved, the rate is the
    schedule's. Bad factors exit 2 and name the value."""
    lr = ["-p", "ppo.learning_rate=1e-3"]
    solved = _train(tmp_path / "solved", "--solved-lr-factor", "0.1", *lr, "success_threshold=0.0")
    unsolved = _train(tmp_path / "unsolved", "--solved-lr-factor", "0.1", "--solved-lr-streak", "5", *lr,
                      "success_threshold=0.0")  # 4 evaluations: the streak is never reached
    assert _final_lr(unsolved) == 1e-3
    assert abs(_final_lr(solved) - 1e-4) < 1e-12
    assert train_rl.main([*TINY, "-n", "384", "--log-dir", str(tmp_path / "solved"), "--threads", "1", "--resume",
                          "--solved-lr-factor", "0.1", *lr, "success_threshold=0.0"]) == 0
    assert abs(_final_lr(solved) - 1e-4) < 1e-12
    for bad in ("0", "1.5"):
        result = subprocess.run([sys.executable, "train_rl.py", *TINY, "--solved-lr-factor", bad, "-n", "64",
                                 "--log-dir", str(tmp_path / "bad")], cwd=REPO, capture_output=True, text=True)
        assert result.returncode == 2 and f"solved_lr_factor={float(bad)!r}" in result.stderr


def test_solved_lr_streak_waits_for_that_many_solved_evaluations_in_a_row(tmp_path: Path):
    """The run evaluates at 64, 128, 192 and 256 steps, each solved at a threshold of 0: a streak of 4 is
    reached at the last one, whose rollout's update then trains at the factor times the rate; a streak of 5
    is never reached. A streak of 0 exits 2 and names the value."""
    settings = ["--solved-lr-factor", "0.1", "-p", "ppo.learning_rate=1e-3", "success_threshold=0.0"]
    reached = _train(tmp_path / "reached", "--solved-lr-streak", "4", *settings)
    unreached = _train(tmp_path / "unreached", "--solved-lr-streak", "5", *settings)
    assert abs(_final_lr(reached) - 1e-4) < 1e-12
    assert _final_lr(unreached) == 1e-3
    result = subprocess.run([sys.executable, "train_rl.py", *TINY, "--solved-lr-streak", "0", "-n", "64",
                             "--log-dir", str(tmp_path / "bad")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 2 and "solved_lr_streak=0" in result.stderr
