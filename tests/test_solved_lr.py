"""The learning rate after solving: the schedule is scaled by ``solved_lr_factor`` once, from the evaluation that
completes a streak of ``solved_lr_streak`` solved evaluations on, again after a resume; bad settings exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import train_rl
from agents import MemoryPPO
from experiments.solved_lr import ScaledSchedule, solved_schedule
from tests.test_cli import REPO, TINY
from tests.test_evaluation import _train


def test_the_solved_schedule_scales_once():
    """``factor`` times the schedule at every progress; scaling an already scaled schedule, or by 1, leaves it
    (mutation caught: wrapping again at every solved evaluation, which compounds the factor)."""
    base = lambda progress: 1e-3 * progress  # noqa: E731
    scaled = solved_schedule(base, 0.1)
    assert isinstance(scaled, ScaledSchedule) and abs(scaled(0.5) - 5e-5) < 1e-15
    assert solved_schedule(scaled, 0.1) is scaled
    assert solved_schedule(base, 1.0) is base


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
