"""Evaluations score the deterministic and the stochastic policy; the stochastic one leaves the
training that follows unchanged, and runs logged before its columns resume in their own layout."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch

import train_rl
from agents import MemoryPPO
from experiments.evaluation import EVAL_COLUMNS, EvalLog
from tests.test_cli import TINY


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
