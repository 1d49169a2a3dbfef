"""``notebooks/learned_spans.py``: the spans adaptive-span heads learned, read from a run's models."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import train_rl
from tests.test_cli import REPO

TINY = ["-p", "ppo.n_steps=16", "ppo.batch_size=32", "ppo.n_epochs=1", "ppo.segment_length=4",
        "gtrxl.memory_length=8", "gtrxl.d_model=16", "gtrxl.n_heads=2", "gtrxl.n_layers=2", "n_eval_envs=2"]


def train(log_dir: Path, attention: str) -> None:
    argv = ["--env", "TMaze-v0", "--env-kwargs", "length=4", "--n-envs", "4", "-n", "128", "--eval-freq", "0",
            "--n-eval-episodes", "2", "--checkpoint-freq", "64", "--threads", "1", "--log-dir", str(log_dir),
            *TINY, f"gtrxl.attention={attention}", *(["ppo.aux_coefs={span: 10.0}"] if attention != "full" else [])]
    assert train_rl.main(argv) == 0


def spans_command(runs: Path, out: Path) -> list[str]:
    return [sys.executable, str(REPO / "notebooks" / "learned_spans.py"), str(runs), "--name", "spans",
            "--out", str(out)]


@pytest.mark.slow
def test_the_benchmark_reports_every_head_at_every_checkpoint(tmp_path: Path):
    """A strong penalty shrinks the spans below the memory length; the report has two layers of two heads
    at each checkpoint and at the end (mutations caught: spans read from one layer only, reported as
    fractions of the memory instead of steps)."""
    train(tmp_path / "runs", "adaptive-span")
    subprocess.run(spans_command(tmp_path / "runs", tmp_path), check=True, cwd=REPO, capture_output=True)
    (run,) = json.loads((tmp_path / "spans.json").read_text())["runs"]
    assert run["memory_length"] == 8
    assert [len(layer) for layer in run["final_spans"]] == [2, 2]
    assert all(4.0 < z < 8.0 for layer in run["final_spans"] for z in layer), "in steps, shrunk by the penalty"
    assert [point["timesteps"] for point in run["history"]] == [64, 128]
    assert "| final spans (steps) |" in (tmp_path / "spans.md").read_text()


def test_runs_without_adaptive_spans_are_refused_by_name(tmp_path: Path):
    train(tmp_path / "runs", "full")
    done = subprocess.run(spans_command(tmp_path / "runs", tmp_path), cwd=REPO, capture_output=True, text=True)
    assert done.returncode != 0 and "no adaptive-span attention in the model (attention 'full')" in done.stderr
