"""Advantage normalisation keeps a solved policy's residue small (agents/advantages.py): the sustained scale, its
floor on the minibatch standardisation, its record in a saved model, and a solved memory run that stays solved."""

from __future__ import annotations

import json

import pytest
import torch

from agents import MemoryPPO
from agents.advantages import SUSTAINED_ROLLOUTS, normalized, sustained_scale
from envs import make_vec_env

SMALL = {"n_steps": 8, "batch_size": 16, "segment_length": 4, "n_epochs": 1,
         "policy_kwargs": {"backbone": "gru", "backbone_kwargs": {"hidden_size": 8}}}


def test_the_sustained_scale_is_a_median_that_falls_by_the_decay_at_most() -> None:
    assert sustained_scale(0.0, [15.0, 5.0, 4.0], 0.999) == 5.0  # one untrained-critic rollout does not set it
    assert sustained_scale(0.8, [0.01], 0.5) == 0.4  # a solved run's residue: the scale falls by δ per rollout
    assert sustained_scale(0.8, [0.9, 1.0], 0.5) == 0.95
    assert sustained_scale(0.8, [0.9], 0.0) == 0.0  # δ = 0: no floor


def test_standardisation_never_divides_by_less_than_the_floor() -> None:
    torch.manual_seed(0)
    residue = 0.01 * torch.randn(64) - 0.003
    sb3 = normalized(residue, 0.0)
    assert sb3.mean().abs() < 1e-6 and sb3.std() == pytest.approx(1.0, abs=1e-4)  # SB3's: unit scale
    kept = normalized(residue, 0.8)
    assert kept.std() == pytest.approx(residue.std().item() / 0.8, rel=1e-4)  # the residue keeps its size
    signal = torch.randn(64)
    assert torch.allclose(normalized(signal, 0.5), normalized(signal, 0.0))  # a learning signal: unchanged


def test_the_learner_tracks_the_scale_per_rollout_and_saves_it(tmp_path) -> None:
    model = MemoryPPO("MemoryPolicy", make_vec_env("MemoryChain-v0", 2, seed=0, length=3), seed=0, **SMALL)
    model.learn(16 * (SUSTAINED_ROLLOUTS + 1))
    stds = model._advantage_stds
    assert len(stds) == SUSTAINED_ROLLOUTS and model.advantage_scale >= sorted(stds)[len(stds) // 2]
    model.save(tmp_path / "m")
    loaded = MemoryPPO.load(tmp_path / "m")
    assert loaded.advantage_scale == model.advantage_scale and loaded._advantage_stds == stds  # resumes with it
    sb3 = MemoryPPO("MemoryPolicy", make_vec_env("MemoryChain-v0", 2, seed=0, length=3), seed=0,
                    advantage_scale_decay=0.0, **SMALL)
    sb3.learn(32)
    assert sb3.advantage_scale == 0.0


@pytest.mark.parametrize("decay", [-0.1, 1.5])
def test_a_decay_outside_0_1_is_refused_by_name(decay: float) -> None:
    with pytest.raises(ValueError, match=rf"advantage_scale_decay={decay}: expected a number in \[0, 1\]"):
        MemoryPPO("MemoryPolicy", make_vec_env("MemoryChain-v0", 2, seed=0, length=3), advantage_scale_decay=decay,
                  **SMALL)


@pytest.mark.slow
def test_a_solved_memory_run_stays_solved_where_sb3s_standardisation_loses_it(tmp_path) -> None:
    """configs/memory_chain.yaml, GTrXL, seed 1 (one thread): solved from ~8k steps on; with SB3's standardisation
    (δ = 0) its last update un-learns the cue (success 0.46), with the sustained scale it ends solved."""
    import train_rl

    base = ["--config", "configs/memory_chain.yaml", "--backbone", "gtrxl", "--seed", "1", "-n", "30000",
            "--eval-freq", "2500", "--threads", "1"]
    summaries = {}
    for decay in ("0.0", "0.999"):
        log_dir = tmp_path / decay
        assert train_rl.main([*base, "--log-dir", str(log_dir), "-p", f"ppo.advantage_scale_decay={decay}"]) == 0
        summaries[decay] = json.loads(next(log_dir.glob("*/summary.json")).read_text())
    assert summaries["0.999"]["final_success_rate"] >= 0.9
    assert summaries["0.0"]["final_success_rate"] < 0.9  # the failure this guards against, on this seed
