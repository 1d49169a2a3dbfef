"""kNN-LM (Khandelwal et al. 2020): the neighbour distribution against its formula, the interpolation,
and retrieval that returns a stored context's continuation."""

from __future__ import annotations

import math

import pytest
import torch

from lm.workbench import KNNSettings, bits_per_token, build_datastore
from policies.lm.knn import Datastore, interpolate, knn_lm_loss
from policies.lm.model import MemoryLanguageModel
from tests.conftest import tiny_copy_lm


def test_neighbour_distribution_follows_the_formula():
    """``p_kNN(w) ∝ Σ_{i ∈ kNN} 1[v_i = w] exp(−‖q − k_i‖²)`` over the ``k`` nearest keys (mutations caught:
    distances not squared, neighbours chosen by largest distance, tokens of non-neighbours counted)."""
    torch.manual_seed(0)
    keys, values = torch.randn(20, 3, dtype=torch.float64), torch.randint(0, 5, (20,))
    queries = torch.randn(4, 3, dtype=torch.float64)
    log_probs = Datastore(keys, values, vocab_size=5).knn_log_probs(queries, k=6)
    for query, row in zip(queries, log_probs, strict=True):
        distances = ((keys - query) ** 2).sum(-1)
        nearest = distances.argsort()[:6]
        mass = torch.zeros(5, dtype=torch.float64)
        for i in nearest:
            mass[values[i]] += torch.exp(-distances[i])
        torch.testing.assert_close(row.exp(), mass / mass.sum())


def test_interpolation_mixes_probabilities():
    lm, knn = torch.log_softmax(torch.randn(3, 4), -1), torch.log_softmax(torch.randn(3, 4), -1)
    torch.testing.assert_close(interpolate(lm, knn, 0.25).exp(), 0.75 * lm.exp() + 0.25 * knn.exp())
    assert interpolate(lm, knn, 0.0) is lm
    with pytest.raises(ValueError, match=r"weight=1.5: expected a number in \[0, 1\]"):
        interpolate(lm, knn, 1.5)
    with pytest.raises(ValueError, match=r"k=3: expected an integer in \[1, 2\] \(at most the datastore size\)"):
        Datastore(torch.randn(2, 3), torch.tensor([0, 1]), 4).knn_log_probs(torch.randn(1, 3), 3)


def test_weight_zero_is_the_language_model():
    torch.manual_seed(0)
    model = MemoryLanguageModel(8, backbone="trxl", d_embed=8, d_model=16, n_heads=2, n_layers=1, memory_length=4)
    tokens = torch.randint(0, 8, (6, 2))
    state = model.initial_state(2)
    datastore = Datastore(torch.randn(10, 16), torch.randint(0, 8, (10,)), 8)
    with torch.no_grad():
        expected, _, _ = model.loss(tokens, state)
        mixed, _ = knn_lm_loss(model, tokens, state, datastore, k=3, weight=0.0)
    torch.testing.assert_close(mixed, expected)


def test_retrieval_returns_the_continuation_of_a_stored_context(tmp_path):
    """A datastore of the evaluation text itself, read the same way: each context's nearest key is its
    own (distance 0), so with ``k = 1`` the kNN half puts all its mass on the true next token and
    ``λ = 0.5`` costs at most 1 bit per token, far below the untrained model's ≈ 3 bits."""
    config, model, stream = tiny_copy_lm(tmp_path)
    lm_bits = bits_per_token(model, stream, config, 6)
    datastore = build_datastore(model, stream, config, 6)
    assert len(datastore) == 6 * 8 * 4
    knn_bits = bits_per_token(model, stream, config, 6, KNNSettings(datastore, k=1, weight=0.5))
    assert lm_bits > 2.5 and knn_bits <= 1.0 + 1e-6 < lm_bits - 1, (lm_bits, knn_bits)
    assert math.isclose(bits_per_token(model, stream, config, 6, KNNSettings(datastore, k=1, weight=0.0)), lm_bits,
                        rel_tol=1e-6)
