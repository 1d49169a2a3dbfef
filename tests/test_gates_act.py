"""A fresh GTrXL block is near the identity, and ACT halting (docs/design.md, "Invariants")."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from stable_baselines3.common.policies import BasePolicy

from policies.attention.layer import make_attention
from policies.backbones.act import AdaptiveComputationTime
from policies.backbones.transformer_xl import GATES, GRUGate, TransformerXLBlock, make_gate
from policies.registry import make_backbone
from policies.window import attention_mask

D = 64


def relative_deviation(gate: str, gate_bias: float | None, layout: str = "identity-map") -> float:
    """Mean ``‖block(x) − x‖ / ‖x‖`` of fresh one-layer blocks over 5 seeds."""
    deviations = []
    for seed in range(5):
        torch.manual_seed(seed)
        attention = make_attention("full", D, 4, 16, max_distance=6)
        block = TransformerXLBlock(attention, D, 4 * D, layout=layout, gate=gate, gate_bias=gate_bias)
        h, memory = torch.randn(8, 10, D), torch.randn(8, 6, D)
        mask = attention_mask(torch.ones(8, 6, dtype=torch.bool), torch.zeros(8, 10, dtype=torch.bool), 6)
        with torch.no_grad():
            out, _ = block(h, block.memory_kv(memory), mask, block.attn.position_terms())
        deviations.append(((out - h).norm() / h.norm()).item())
    return sum(deviations) / len(deviations)


def test_fresh_gtrxl_block_is_close_to_identity():
    """A fresh GTrXL block is near the identity: with the default b_g = 2 the GRU-gated block stays near the
    identity map (measured ≈ 0.35 relative deviation), much nearer than with b_g = 0 (≈ 0.80) or TrXL-I (≈ 0.40)."""
    gated = relative_deviation("gru", None)
    assert gated < 0.45
    assert gated < 0.6 * relative_deviation("gru", 0.0)
    assert gated < relative_deviation("residual", None)


@pytest.mark.parametrize("gate", ["output", "highway", "sigmoid-tanh", "input"])
def test_default_gate_bias_moves_every_gate_towards_identity(gate):
    assert relative_deviation(gate, None) < relative_deviation(gate, 0.0)


def test_gate_bias_defaults():
    assert make_gate("gru", 8).bias.detach().eq(2.0).all()
    for name in ("input", "output", "highway", "sigmoid-tanh"):
        assert make_gate(name, 8).bias.detach().eq(1.0).all()
    assert make_gate("gru", 8, bias=0.5).bias.detach().eq(0.5).all()


def test_gru_gate_formula():
    torch.manual_seed(0)
    gate = GRUGate(6)
    x, y = torch.randn(3, 6), torch.randn(3, 6)
    W_r, W_z, W_g = gate.w_rzg.weight.chunk(3)
    U_r, U_z = gate.u_rz.weight.chunk(2)
    r = torch.sigmoid(y @ W_r.T + x @ U_r.T)
    z = torch.sigmoid(y @ W_z.T + x @ U_z.T - gate.bias)
    h = torch.tanh(y @ W_g.T + (r * x) @ gate.u_g.weight.T)
    torch.testing.assert_close(gate(x, y), (1 - z) * x + z * h)


def test_sb3_ortho_init_leaves_gate_biases_alone():
    """SB3's init_weights zeroes nn.Linear biases; b_g is a parameter of its own."""
    backbone = make_backbone("gtrxl", 4, d_model=16, n_layers=2, n_heads=2, memory_length=4)
    backbone.apply(partial(BasePolicy.init_weights, gain=1.0))
    biases = [p for n, p in backbone.named_parameters() if n.endswith("gate.bias")]
    assert len(biases) == 4 and all(p.detach().eq(2.0).all() for p in biases)


def test_unknown_gate_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid gates: " + ", ".join(GATES)):
        make_gate("lstm", 4)


def constant_halting(p: float, max_steps: int, epsilon: float = 0.01) -> AdaptiveComputationTime:
    act = AdaptiveComputationTime(4, max_steps, epsilon)
    with torch.no_grad():
        act.halting.weight.zero_()
        act.halting.bias.fill_(torch.logit(torch.tensor(p)).item())
    return act


def plus_one(n: int, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return state, state + 1.0


@pytest.mark.parametrize("p,max_steps,weights,steps,remainder", [
    (0.4, 5, [0.4, 0.4, 0.2, 0, 0], 3, 0.2),   # cumulative 0.8 + 0.4 > 0.99: halt at step 3
    (0.4, 2, [0.4, 0.6], 2, 0.6),              # forced to halt at the maximum
    (0.995, 3, [1.0, 0, 0], 1, 1.0),           # above 1 - ε at once: N = 1, R = 1
])
def test_act_halting_by_hand(p, max_steps, weights, steps, remainder):
    """Act halting: weights sum to 1, steps ≤ max, ponder cost = N + R, on hand-computed cases."""
    act = constant_halting(p, max_steps)
    state = torch.zeros(2, 3, 4)
    out, ponder = act(state, plus_one)
    torch.testing.assert_close(ponder.weights[:, 0, 0], torch.tensor(weights))
    assert ponder.steps.eq(steps).all() and ponder.steps.le(max_steps).all()
    torch.testing.assert_close(ponder.remainder, torch.full((2, 3), remainder))
    torch.testing.assert_close(ponder.cost, torch.full((2, 3), steps + remainder))
    torch.testing.assert_close(ponder.weights.sum(0), torch.ones(2, 3))
    torch.testing.assert_close(out, torch.ones(2, 3, 4))  # Σ w_n · 1 added to a zero state


def test_act_on_random_states_and_gradient_to_halting_unit():
    torch.manual_seed(0)
    act = AdaptiveComputationTime(8, max_steps=6, halting_bias=-1.0)
    state = torch.randn(4, 9, 8)
    calls = []

    def transition(n: int, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(n)
        return s, torch.tanh(s * 1.5 + n)

    out, ponder = act(state, transition)
    assert calls == list(range(6))  # a fixed-shape loop: always max_steps calls
    torch.testing.assert_close(ponder.weights.sum(0), torch.ones(4, 9))
    assert ponder.steps.ge(1).all() and ponder.steps.le(6).all() and ponder.steps.unique().numel() > 1
    ponder.cost.sum().backward()
    assert act.halting.weight.grad.abs().sum() > 0 and act.halting.bias.grad.abs().sum() > 0


def test_ut_act_reports_ponder_statistics():
    backbone = make_backbone("ut-act", 4, d_model=16, n_heads=2, memory_length=4, max_steps=3)
    _, _, aux = backbone.forward_sequence(torch.randn(5, 2, 4), backbone.initial_state(2),
                                          torch.zeros(5, 2, dtype=torch.bool))
    assert set(aux) == {"ponder_cost", "ponder_steps"} and aux["ponder_cost"].shape == (5, 2)
    assert aux["ponder_steps"].le(3).all() and (aux["ponder_cost"] > aux["ponder_steps"]).all()
    assert backbone.aux_loss_coefs == {"ponder_cost": 0.01}
