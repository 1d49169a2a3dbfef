"""Depth-adaptive exits (Elbayad et al. 2020) in the layer-stack Transformers and the language model."""

from __future__ import annotations

import pytest
import torch

from policies import make_backbone
from policies.lm.depths import forward_with_exits
from policies.lm.model import MemoryLanguageModel

T, B, X, M = 7, 3, 5, 4


def backbone():
    torch.manual_seed(0)
    return make_backbone("gtrxl", X, d_model=16, n_heads=2, n_layers=3, memory_length=M).eval()


def segment():
    torch.manual_seed(1)
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[0] = True
    starts[4, 1] = True
    return torch.randn(T, B, X), starts


def by_sign(n: int, h: torch.Tensor) -> torch.Tensor:
    """A content-dependent rule: leave after layer 0 where the first feature is positive, after layer 1
    where the second one is."""
    return h[..., n] > 0


@torch.no_grad()
def test_a_rule_that_never_fires_changes_nothing():
    net = backbone()
    x, starts = segment()
    y, state, _ = net.forward_sequence(x, net.initial_state(B), starts)
    y_exits, state_exits, aux = forward_with_exits(net, x, net.initial_state(B), starts,
                                                       lambda n, h: torch.zeros(h.shape[:2], dtype=torch.bool))
    torch.testing.assert_close(y_exits, y, atol=0, rtol=0)
    torch.testing.assert_close(state_exits.memory, state.memory, atol=0, rtol=0)
    assert (aux["exit_depth"] == 3).all()


@torch.no_grad()
def test_an_exited_state_is_copied_to_every_later_layer():
    """Leaving after layer 0 everywhere: the output is layer 0's, and the window keeps it as the input of
    layers 1 and 2 (mutations caught: the exited position run through the later layers anyway; its
    deeper records taken from the layers' outputs)."""
    net = backbone()
    x, starts = segment()
    y, state, aux = forward_with_exits(net, x, net.initial_state(B), starts,
                                           lambda n, h: torch.ones(h.shape[:2], dtype=torch.bool))
    assert (aux["exit_depth"] == 1).all()
    first = make_backbone("gtrxl", X, d_model=16, n_heads=2, n_layers=1, memory_length=M).eval()
    first.load_state_dict(net.state_dict(), strict=False)  # embedding and layer 0
    torch.testing.assert_close(y, first.forward_sequence(x, first.initial_state(B), starts)[0], atol=1e-6, rtol=0)
    memory = state.memory[state.valid]  # [n, depth, D]
    torch.testing.assert_close(memory[:, 1], memory[:, 2], atol=0, rtol=0)


@torch.no_grad()
def test_a_segment_at_once_equals_one_position_at_a_time():
    """Exits depend on a position's own state and earlier positions' only, so the parallel pass equals the
    sequential one that carries the copied states in the window (mutation caught: exit flags misaligned in
    time, a position frozen by its predecessor's exit)."""
    net = backbone()
    x, starts = segment()
    y, state, aux = forward_with_exits(net, x, net.initial_state(B), starts, by_sign)
    assert 0 < (aux["exit_depth"] < 3).float().mean() < 1, "the rule must send some positions out early"
    carried, outputs, depths = net.initial_state(B), [], []
    for t in range(T):
        y_t, carried, aux_t = forward_with_exits(net, x[t:t + 1], carried, starts[t:t + 1], by_sign)
        outputs.append(y_t)
        depths.append(aux_t["exit_depth"])
    torch.testing.assert_close(torch.cat(outputs), y, atol=1e-6, rtol=0)
    assert torch.equal(torch.cat(depths), aux["exit_depth"])
    torch.testing.assert_close(carried.memory, state.memory, atol=1e-6, rtol=0)


@torch.no_grad()
def test_the_language_model_reports_loss_and_layers_per_token():
    torch.manual_seed(0)
    lm = MemoryLanguageModel(vocab_size=11, backbone="gtrxl", d_model=16, n_heads=2, n_layers=3, memory_length=M).eval()
    tokens = torch.randint(11, (9, 2))
    loss, _, _ = lm.loss(tokens, lm.initial_state(2))
    never, layers, _ = lm.early_exit_loss(tokens, lm.initial_state(2), threshold=1.5)
    assert never.item() == pytest.approx(loss.item(), abs=1e-6) and layers.item() == 3.0
    _, layers, _ = lm.early_exit_loss(tokens, lm.initial_state(2), threshold=0.0)
    assert layers.item() == 1.0
    ut = MemoryLanguageModel(vocab_size=11, backbone="ut-act", d_model=16, n_heads=2, memory_length=M)
    with pytest.raises(ValueError, match="early exits need a stack of distinct Transformer layers.*UniversalTransf"):
        ut.early_exit_loss(tokens, ut.initial_state(2), threshold=0.5)
