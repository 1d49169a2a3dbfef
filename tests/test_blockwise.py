"""BlockBERT's blockwise attention (Qiu et al. 2020), causal and laid out in episode time: the per-head pattern
against the paper's block permutations written out, plain content attention as its one-block case, heads
whose block holds no key, the backbone applying each head's pattern, and bad options. The memory invariants run
for it with every other attention (``gtrxl-blockwise`` in tests/test_backbones.py and tests/test_ppo.py)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build_attention

from policies import make_backbone
from policies.attention.layer import attend
from policies.window import attention_mask
from tests.conftest import inputs_seen_last


def paper_pattern(i: int, j: int, l: int, s: int) -> bool:  # noqa: E741 (the paper's symbols)
    """Query ``i`` sees key ``j ≤ i`` of the block ``s`` blocks before its own (the permutation ``b ↦ b − s``)."""
    return j <= i and j // l == i // l - s


@pytest.mark.parametrize(("block_length", "shifts"), [(3, [0, 1]), (2, [2, 0, 1]), (4, [1, 1]), (1, [0, 3])])
def test_per_head_pattern_is_the_papers_block_permutation(block_length, shifts):
    """Queries at episode times 7…11 with 9 keys before them, every head against its shift (mutations caught:
    the shift added instead of subtracted, blocks counted from the segment's start, one shift for all heads)."""
    T, M = 5, 9
    attention = build_attention("blockwise", 12, len(shifts), 4, max_distance=M, block_length=block_length,
                                shifts=shifts)
    pattern = attention.pattern.episode_pattern(torch.arange(7, 7 + T).view(1, T), M + T)[0]
    assert pattern.shape == (len(shifts), T, M + T)
    for h, s in enumerate(shifts):
        for q in range(T):
            i = 7 + q
            for key in range(M + q + 1):  # the keys up to the query itself (slot M + q)
                j = i - (M + q - key)
                assert bool(pattern[h, q, key]) == paper_pattern(i, j, block_length, s), (h, i, j)


def test_defaults_split_the_heads_and_fit_the_window():
    """First ``⌈H/2⌉`` heads unshifted, the others one block back; ``l = ⌊(M + 1)/2⌋`` so the farthest key is
    ``M`` steps back (mutations caught: the extra head of an odd ``H`` shifted, a default block one step short)."""
    attention = build_attention("blockwise", 12, 3, 4, max_distance=9)
    assert attention.pattern.shifts.flatten().tolist() == [0, 0, 1]
    assert (attention.pattern.block_length, attention.reach) == (5, 9)


def test_one_unshifted_block_is_plain_content_attention():
    """All shifts 0 and a block longer than the episode: GTrXL with ``blockwise`` and the same weights as with
    ``none`` gives the same outputs, stepping and on the whole sequence (mutations caught: the zero output taken
    for rows that have keys, ``all`` for ``any``; key blocks cut one step off the queries')."""
    options = {"d_model": 16, "n_heads": 2, "n_layers": 2, "memory_length": 4}
    torch.manual_seed(0)
    plain = make_backbone("gtrxl", 3, attention="full", position="none", **options)
    blockwise = make_backbone("gtrxl", 3, attention="blockwise", attention_options={"block_length": 20,
                                                                                  "shifts": [0, 0]}, **options)
    blockwise.load_state_dict(plain.state_dict())
    T = 12
    x = torch.randn(T, 2, 3)
    starts = torch.zeros(T, 2, dtype=torch.bool)
    starts[0] = True
    starts[5, 1] = True
    with torch.no_grad():
        expected = plain.forward_sequence(x, plain.initial_state(2), starts)[0]
        torch.testing.assert_close(blockwise.forward_sequence(x, blockwise.initial_state(2), starts)[0], expected,
                                   atol=1e-6, rtol=0)
        state, stepped = blockwise.initial_state(2), []
        for t in range(T):
            y, state = blockwise.step(x[t], state, starts[t])
            stepped.append(y)
    torch.testing.assert_close(torch.stack(stepped), expected, atol=1e-6, rtol=0)


def written_out_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor,
                          dropout_p: float, scale: float) -> torch.Tensor:
    """``scaled_dot_product_attention`` written out: a row with no visible key gives NaN, as the explicit softmax
    does (torch's CPU kernel returns zeros there, other kernels need not)."""
    return (q @ k.transpose(-2, -1) * scale).masked_fill(~attn_mask, float("-inf")).softmax(dim=-1) @ v


@pytest.mark.parametrize("kernel", ["torch", "written-out"])
def test_a_head_without_keys_outputs_zero(kernel, monkeypatch):
    """Head 1 looks one block of 3 back: at episode times 0–2 that block does not exist, and at the last step of
    every later block it lies 3–5 steps back, beyond the window of M = 2; those outputs are exactly zero, the
    others the softmax over the block's visible keys, and outputs and gradients are finite whatever the kernel
    does with an empty row (mutations caught: the query's own step kept as the output; no key given to the
    empty rows, whose NaN then reaches the gradients through the written-out softmax)."""
    if kernel == "written-out":
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", written_out_attention)
    torch.manual_seed(0)
    T, M, D = 9, 2, 8
    attention = build_attention("blockwise", D, 2, 4, max_distance=M, block_length=3, shifts=[0, 1]).double()
    h = torch.randn(1, T, D, dtype=torch.float64)
    starts = torch.zeros(1, T, dtype=torch.bool)
    starts[0, 0] = True
    mask = attention_mask(torch.zeros(1, M, dtype=torch.bool), starts, M).unsqueeze(1)  # [1, 1, T, M + T]
    mask = mask & attention.pattern.episode_pattern(torch.arange(T).view(1, T), M + T)
    q, k, v = attention.segment_qkv(h, attention.keys_values(torch.zeros(1, M, D, dtype=torch.float64)))
    out = attend(q, k, v, mask, scale=attention.scale)
    out.sum().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in (attention.q_net.weight, attention.kv_net.weight))
    empty = [0, 1, 2, 5, 8]
    assert not mask[0, 1, empty].any() and mask[0, 1].any(dim=-1).sum() == T - len(empty)
    head = out[0, 1].detach()
    assert head[empty].eq(0).all()
    for t in sorted(set(range(T)) - set(empty)):
        visible = mask[0, 1, t]
        weights = torch.softmax(q[0, 1, t] @ k[0, 1, visible].T / math.sqrt(4), dim=-1)
        torch.testing.assert_close(head[t], (weights @ v[0, 1, visible]).detach())


@pytest.mark.parametrize(("shifts", "seen"), [([0, 2], [[9, 10], [3, 4, 5, 10]]),
                                              ([1, 3], [[6, 7, 8, 10], [0, 1, 2, 10]])])
def test_the_backbone_sees_exactly_each_heads_block(shifts, seen):
    """One GTrXL layer, memory 10, blocks of 3, every head but one silenced (its output projection zeroed): the
    output at episode time 10 (block 9–11) moves with the inputs of that head's block and with its own input
    (the residual stream), and with no other (mutations caught: the backbone ignoring the pattern, or giving
    every head the union of the heads' patterns, or one head's pattern)."""
    x = torch.randn(11, 1, 3, generator=torch.Generator().manual_seed(1))
    for head in range(len(shifts)):
        torch.manual_seed(0)
        backbone = make_backbone("gtrxl", 3, d_model=16, n_heads=2, n_layers=1, memory_length=10,
                                 attention="blockwise", attention_options={"block_length": 3, "shifts": shifts})
        with torch.no_grad():
            projection = backbone.memory_blocks[0].attn.out_net.weight.view(16, len(shifts), 8)  # [D, H, d_head]
            projection[:, [h for h in range(len(shifts)) if h != head]] = 0.0
        assert inputs_seen_last(backbone, x) == seen[head], head


@pytest.mark.parametrize(("options", "message"), [
    ({"shifts": [0, 1, 1]}, "shifts must hold one shift per head \\(2 heads\\), got 3: \\[0, 1, 1\\]"),
    ({"shifts": [0, -1]}, "shifts\\[1\\]=-1: expected an integer >= 0, in shifts=\\[0, -1\\]"),
    ({"block_length": 0}, "block_length=0: expected an integer >= 1"),
])
def test_bad_options_name_the_value_and_the_valid_range(options, message):
    """Mutation caught: a check left out (negative shifts)."""
    with pytest.raises(ValueError, match=message):
        build_attention("blockwise", 8, 2, 4, max_distance=9, **options)
