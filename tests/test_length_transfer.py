"""``notebooks/length_transfer.py``: a T-Maze run's final policy scored on other corridor lengths,
with a longer kNN store around the same weights, and with retrieval switched off (every gate at 0)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import train_rl
from agents import MemoryPPO
from tests.test_cli import REPO, TINY

sys.path.insert(0, str(REPO / "notebooks"))
from length_transfer import switch_off_retrieval  # noqa: E402


@pytest.mark.slow
def test_length_transfer_scores_every_length_with_and_without_retrieval(tmp_path: Path):
    knn = ["-p", "gtrxl.attention=knn", "gtrxl.attention_options={local_window: 2, top_k: 1}"]
    assert train_rl.main([*TINY, "-n", "64", "--log-dir", str(tmp_path / "runs"), "--threads", "1", *knn]) == 0
    (run,) = (tmp_path / "runs").glob("TMaze-v0__*")
    model = MemoryPPO.load(run / "model.zip", device="cpu")
    assert switch_off_retrieval(model.policy) >= 1
    gates = [m.gate() for m in model.policy.modules() if hasattr(m, "gate_logit")]
    assert all(torch.equal(g, torch.zeros_like(g)) for g in gates)
    command = [sys.executable, "notebooks/length_transfer.py", "--name", "transfer", "--out", str(tmp_path),
               str(run), "--lengths", "3", "6", "--episodes", "4", "--store-length", "8", "--envs", "2"]
    subprocess.run(command, check=True, cwd=REPO, capture_output=True)
    (row,) = json.loads((tmp_path / "transfer.json").read_text())["runs"]
    assert row["trained_length"] == 3 and row["memory_length"] == 8 and row["member"] == "knn"
    for policy in ("with_retrieval", "without_retrieval"):
        assert set(row[policy]) == {"3", "6"} and all(0.0 <= v <= 1.0 for v in row[policy].values())
    assert "| without retrieval |" in (tmp_path / "transfer.md").read_text()
