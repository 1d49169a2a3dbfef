"""Reversible layers (RevNet, Gomez et al. 2017; Reformer, Kitaev et al. 2020): the inverse, gradients
equal to plain autograd's, and what backward keeps. The memory invariants and rollout equals training run on the
``trxl-rev`` backbone through the registry (``tests/test_backbones.py``, ``tests/test_ppo.py``)."""

from __future__ import annotations

import pytest
import torch

import policies.backbones.reversible_transformer
from experiments.activation_bytes import saved_activation_bytes
from policies import ATTENTIONS, make_backbone
from policies.attention.layer import make_attention
from policies.backbones.reversible import ReversibleLayer, reversible_stack, run_layers
from policies.backbones.transformer_xl import TransformerXLBlock
from policies.lm.depths import forward_with_depths
from policies.window import attention_mask

B, T, M, D, INPUT_DIM = 3, 6, 4, 16, 5


def build(dtype: torch.dtype = torch.float64, **options: object) -> torch.nn.Module:
    torch.manual_seed(0)
    return make_backbone("trxl-rev", INPUT_DIM, **{"d_model": D, "n_heads": 2, "memory_length": M, **options}).to(dtype)


def segment(backbone: torch.nn.Module, dtype: torch.dtype = torch.float64):
    """Inputs, a state whose env b's episode began M - b steps ago, and episode starts mid-segment."""
    torch.manual_seed(1)
    x = torch.randn(T, B, INPUT_DIM, dtype=dtype)
    state = backbone.initial_state(B)
    state = state._replace(memory=torch.randn_like(state.memory),
                           valid=torch.arange(M).view(1, -1) >= torch.arange(B).view(-1, 1))
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[3, 1] = starts[4, 2] = True
    return x, state, starts


def layer_contexts(backbone: torch.nn.Module, memory: torch.Tensor, valid: torch.Tensor, starts: torch.Tensor):
    """Every layer's context as the backbone builds it, with memory keys and values that carry gradient."""
    mask = attention_mask(valid, starts, M)
    return [(*block.memory_kv(memory[:, :, n]), mask, block.attn.position_terms())
            for n, block in enumerate(backbone.memory_blocks)]


@pytest.mark.parametrize("attention", list(ATTENTIONS))
def test_inverse_reproduces_the_inputs(attention):
    """``X₂ = Y₂ − G(Y₁)``, ``X₁ = Y₁ − F(X₂)`` gives back the inputs from the outputs, with memory, mask and
    position terms as constant inputs (mutation caught: ``X₁ = Y₁``, the attention term dropped)."""
    backbone = build(attention=attention)
    x, state, starts = segment(backbone)
    layer = backbone.layers[0]
    context = layer_contexts(backbone, state.memory, state.valid, starts.T)[0]
    x1, x2 = torch.randn(2, B, T, D, dtype=torch.float64)
    with torch.no_grad():
        y1, y2, _ = layer(x1, x2, *context)
        inverted = layer.inverse(y1, y2, *context)
    assert not torch.allclose(y1, x1, atol=1e-3) and not torch.allclose(y2, x2, atol=1e-3)
    torch.testing.assert_close(inverted, (x1, x2), atol=1e-12, rtol=0)


@pytest.mark.parametrize("attention", list(ATTENTIONS))
def test_gradients_equal_plain_autograd(attention, monkeypatch):
    """The input's and every parameter's gradient from the reconstructing backward equal those of the same
    stack run with plain autograd, in float64, through memory keys and values, position terms, episode
    starts inside the segment and a loss on the records (the LM's intermediate-layer loss) (mutations
    caught: the recomputed attention fed ``Y₂`` instead of the reconstructed ``X₂``; the records' gradient
    dropped; the context's gradient dropped, so none reaches the key/value projection through the memory)."""
    backbone = build(attention=attention)
    x, state, starts = segment(backbone)

    def gradients():
        backbone.zero_grad()
        inputs = x.clone().requires_grad_()
        y, records, _, aux = forward_with_depths(backbone, inputs, state, starts)
        loss = (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum() + records.sin().sum()
        (loss + sum(value.sum() for value in aux.values())).backward()
        return [y.detach(), inputs.grad] + [p.grad for p in backbone.parameters()]

    reversible = gradients()
    monkeypatch.setattr(policies.backbones.reversible_transformer, "reversible_stack", run_layers)
    plain = gradients()
    names = ["output", "input"] + [name for name, _ in backbone.named_parameters()]
    for name, a, b in zip(names, reversible, plain, strict=True):
        assert a is not None and b is not None, name
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10, msg=name)


@pytest.mark.parametrize("n_layers", [2, 4])
def test_backward_keeps_fewer_bytes_than_plain_autograd(n_layers, monkeypatch):
    """A training segment of the backbone keeps fewer bytes for backward than the same stack under plain
    autograd, and the gap grows with depth (mutation caught: the backbone running :func:`run_layers`)."""
    backbone = build(torch.float32, n_layers=n_layers)
    x, state, starts = segment(backbone, torch.float32)

    def saved() -> int:
        return saved_activation_bytes(lambda: backbone.forward_sequence(x, state, starts), backbone.parameters())

    reversible = saved()
    monkeypatch.setattr(policies.backbones.reversible_transformer, "reversible_stack", run_layers)
    plain = saved()
    layer_activations = n_layers * B * T * D * 4  # at least one [B, T, D] float32 tensor per layer
    assert reversible < plain - layer_activations, (reversible, plain)


def test_stack_keeps_only_its_outputs_and_contexts():
    """The reversible stack keeps for backward exactly the storages of ``Y₁``, ``Y₂`` and the layers' contexts
    (memory keys and values, mask, position terms): nothing of any layer's activations
    (mutation caught: saving every layer's inputs as well)."""
    backbone = build(torch.float32, n_layers=3)
    x, state, starts = segment(backbone, torch.float32)
    contexts = layer_contexts(backbone, state.memory, state.valid, starts.T)
    h = torch.randn(B, T, D, requires_grad=True)
    outputs = []
    saved = saved_activation_bytes(lambda: outputs.extend(reversible_stack(list(backbone.layers), h, h, contexts)),
                                   backbone.parameters())
    kept = [outputs[0], outputs[1]] + [t for context in contexts for t in context if t is not None]
    assert saved == sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in kept}.values())


@pytest.mark.parametrize("layout,gate", [("identity-map", "gru"), ("identity-map", "output"), ("post-ln", "residual")])
def test_only_residual_identity_map_blocks_are_reversible(layout, gate):
    attention = make_attention("full", D, 2, 8, max_distance=M)
    block = TransformerXLBlock(attention, D, 4 * D, layout=layout, gate=gate)
    with pytest.raises(ValueError, match="identity-map block with residual connections: a GTrXL gate"):
        ReversibleLayer(block)
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'gate' for backbone 'trxl-rev'"):
        make_backbone("trxl-rev", INPUT_DIM, gate="gru")


@pytest.mark.parametrize("where", ["block", "attention"])
def test_reversible_layers_refuse_dropout(where):
    """Backward recomputes the branches: a dropout mask drawn again would differ from the forward's."""
    attention = make_attention("full", D, 2, 8, max_distance=M, dropout=0.1 if where == "attention" else 0.0)
    block = TransformerXLBlock(attention, D, 4 * D, dropout=0.1 if where == "block" else 0.0)
    with pytest.raises(ValueError, match="dropout must be 0, got 0.1"):
        ReversibleLayer(block)
