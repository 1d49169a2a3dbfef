"""SPALM-style gated retrieval (Yogatama et al. 2021): the gated read against its formula, the fully
open gate as the LM itself, and a gate that learns to trust neighbours that hold the answer."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import train_rl
from lm.workbench import (
    SPALMSettings,
    bits_per_token,
    build_datastore,
    build_lm_config,
    fine_tune,
    spalm_bits,
    train_lm,
)
from policies.lm.knn import Datastore
from policies.lm.model import MemoryLanguageModel
from policies.lm.spalm import GatedRetrieval, spalm_loss
from tests.conftest import tiny_copy_lm

REPO = Path(__file__).resolve().parents[1]


def test_gated_read_follows_the_formula():
    """``z = g h + (1 − g) Σ_i softmax_i(e_{y_i}ᵀ h) e_{y_i}``, ``g = σ(w_gᵀ h + b_g)``, one query at a time
    (mutations caught: the gate's two sides swapped, softmax over the model dimension, the neighbours'
    embeddings summed without their weights)."""
    torch.manual_seed(0)
    retrieval = GatedRetrieval(4).double()
    torch.nn.init.normal_(retrieval.gate.weight)
    hidden, embedding = torch.randn(5, 4, dtype=torch.float64), torch.randn(7, 4, dtype=torch.float64)
    neighbours = torch.randint(0, 7, (5, 3))
    mixed, gate = retrieval(hidden, neighbours, embedding)
    for h, ys, z, g in zip(hidden, neighbours, mixed, gate, strict=True):
        scores = torch.stack([embedding[y] @ h for y in ys])
        memory = sum(w * embedding[y] for w, y in zip(scores.softmax(0), ys, strict=True))
        expected_gate = torch.sigmoid(retrieval.gate.weight[0] @ h + retrieval.gate.bias[0])
        torch.testing.assert_close(g[0], expected_gate)
        torch.testing.assert_close(z, expected_gate * h + (1 - expected_gate) * memory)


def test_an_open_gate_is_the_language_model():
    torch.manual_seed(0)
    model = MemoryLanguageModel(8, backbone="gtrxl", d_embed=8, d_model=16, n_heads=2, n_layers=1, memory_length=4)
    tokens, state = torch.randint(0, 8, (6, 2)), model.initial_state(2)
    datastore = Datastore(torch.randn(10, 16), torch.randint(0, 8, (10,)), 8)
    with torch.no_grad():
        expected, _, _ = model.loss(tokens, state)
        loss, gate, _ = spalm_loss(model, GatedRetrieval(16, gate_bias=60.0), tokens, state, datastore, k=3)
    torch.testing.assert_close(loss, expected)
    assert gate.item() == 1.0


def test_the_gate_learns_to_trust_neighbours_that_hold_the_answer(tmp_path):
    """A datastore of the text itself: each context's nearest stored key is its own, so its neighbour
    is the true next token. Trained on that text, the gate moves from the LM (g ≈ 0.95) to the
    neighbours (g < 0.2) and the untrained LM's ≈ 3.2 bits fall by more than 0.4 (≈ 2.6 measured: the
    untrained output embeddings tell the tokens apart only so far). Mutation caught: the gate's
    gradient cut, which leaves it at its initial trust in the LM."""
    config, model, stream = tiny_copy_lm(tmp_path)
    datastore = build_datastore(model, stream, config, 60)
    retrieval, losses = fine_tune(model, stream, config, n_segments=60, first=0, lm_lr=0.0,
                                  spalm=SPALMSettings(datastore, k=1, gate_lr=0.05))
    lm_bits = bits_per_token(model, stream, config, 6)
    bits, gate = spalm_bits(model, retrieval, stream, config, 6, datastore, k=1)
    assert lm_bits > 2.5 and bits < lm_bits - 0.4 and gate < 0.2, (lm_bits, bits, gate)
    assert losses[-1] < losses[0]
    assert all(p.requires_grad for p in model.parameters()), "the LM is frozen only while the gate trains"


def test_eval_trains_and_reports_the_gate(tmp_path, capsys):
    config = build_lm_config(None, ["data=copy", "backbone=gtrxl", f"log_dir={tmp_path}", "steps=2", "eval_every=2",
                                    "eval_segments=2", "segment_length=8", "batch_size=4", "copy_tokens=4000",
                                    "backbone_options.d_model=16", "backbone_options.n_heads=2",
                                    "backbone_options.n_layers=1", "backbone_options.memory_length=8"])
    train_lm(config)
    capsys.readouterr()
    args = ["lm", "eval", str(config.directory()), "--knn-k", "4", "--datastore-segments", "4"]
    assert train_rl.main([*args, "--spalm-steps", "3"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert "SPALM (k = 4, datastore of 128 tokens, gate trained on 3 segments, LM frozen)" in line
    assert "mean gate" in line
    bits = float(line.split(": ")[1].split()[0])
    assert math.isfinite(bits)
    assert train_rl.main([*args, "--spalm-steps", "-1"]) == 2
    assert "--spalm-steps=-1: expected an integer >= 0" in capsys.readouterr().err
    assert train_rl.main([*args, "--spalm-steps", "2", "--spalm-lm-lr", "0.001"]) == 0
    assert "gate trained on 2 segments, LM fine-tuned with it at lr 0.001)" in capsys.readouterr().out
    # the benchmark that compares the LM, kNN-LM and SPALM on a finished run
    command = [sys.executable, str(REPO / "benchmarks" / "lm_retrieval.py"), str(config.directory()), "--k", "4",
               "--datastore-segments", "4", "--gate-segments", "3", "--weights", "0.25", "--lm-lr", "0.001",
               "--out", str(tmp_path)]
    subprocess.run(command, check=True, cwd=REPO, capture_output=True)
    result = json.loads((tmp_path / "lm_retrieval.json").read_text())
    assert [row["method"] for row in result["rows"]] == ["LM alone", "kNN-LM, λ = 0.25", "SPALM, LM frozen",
                                                         "LM fine-tuned alone", "SPALM, LM fine-tuned with the gate"]
    assert result["datastore_tokens"] == 128 and 0 < result["rows"][-1]["mean_gate"] < 1


def test_fine_tuning_trains_the_lm_with_the_gate_or_alone(tmp_path):
    """With an LM learning rate the LM's parameters move with the gate (the paper's joint training), and
    without a gate the LM alone trains on the same segments (the control); each run leaves the LM
    trainable (mutation caught: the hidden states computed without gradient, which freezes the LM)."""
    config, model, stream = tiny_copy_lm(tmp_path)
    datastore = build_datastore(model, stream, config, 4)
    before = [p.detach().clone() for p in model.parameters()]
    retrieval, losses = fine_tune(model, stream, config, 3, 4, 1e-3, SPALMSettings(datastore, k=2, gate_lr=0.01))
    assert retrieval is not None and len(losses) == 3
    moved = [not torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True)]
    assert all(moved[:1]) and sum(moved) > len(moved) // 2
    retrieval, losses = fine_tune(model, stream, config, 2, 4, 1e-3)
    assert retrieval is None and len(losses) == 2 and all(p.requires_grad for p in model.parameters())
    with pytest.raises(ValueError, match="nothing to train: no SPALM gate and an LM learning rate of 0.0"):
        fine_tune(model, stream, config, 2, 4, 0.0)
