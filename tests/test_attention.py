"""Invariant 4 (relative attention equals the naive four-term computation), ALiBi against its
formula, the relative shift, the banded mask and the absence of NaN at episode starts."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build_attention

from policies import make_backbone
from policies.attention import ATTENTIONS
from policies.attention.kernel import SharedRecords, join_memory
from policies.attention.layer import MultiHeadAttention, make_attention
from policies.positions.alibi import alibi_slopes
from policies.positions.encodings import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    sinusoid_table,
)
from policies.positions.relative import rel_shift
from policies.window import (
    attention_mask,
    episode_clock,
    gather_windows,
    shared_windows,
    window_before,
    window_history,
    windows,
)

B, M, T, D, H, DH = 2, 5, 7, 12, 3, 4


def naive_relative_attention(attn: MultiHeadAttention, h, memory, mask):
    """The four TrXL terms written out per (query, key), O(T·(M+T)) Python loops."""
    context = torch.cat([memory, h], dim=1)  # [B, M+T, D]
    W_q = attn.q_net.weight.view(H, DH, D)
    W_k, W_v = (w.view(H, DH, D) for w in attn.kv_net.weight.chunk(2, dim=0))
    W_r = attn.position.r_net.weight.view(H, DH, D)
    out = torch.zeros(B, T, H, DH, dtype=h.dtype)
    for b in range(B):
        for n in range(H):
            for i in range(T):
                q = W_q[n] @ h[b, i]
                scores = []
                for j in range(M + T):
                    k = W_k[n] @ context[b, j]
                    distance = M + i - j
                    r = W_r[n] @ sinusoid_table(torch.tensor([max(distance, 0)], dtype=h.dtype), D)[0]
                    a = q @ k                   # (a) content
                    b_term = q @ r              # (b) content-dependent position
                    c = attn.position.u[n] @ k           # (c) global content bias
                    d = attn.position.position_bias[n] @ r  # (d) global position bias
                    score = (a + b_term + c + d) / math.sqrt(DH)
                    scores.append(score if mask[b, i, j] else torch.tensor(float("-inf"), dtype=h.dtype))
                weights = torch.softmax(torch.stack(scores), dim=0)
                values = torch.stack([W_v[n] @ context[b, j] for j in range(M + T)])
                out[b, i, n] = weights @ values
    return attn.out_net(out.reshape(B, T, H * DH))


@pytest.mark.parametrize("grad", [False, True], ids=["acting", "training"])
def test_relative_attention_equals_the_four_terms(grad):
    """Both execution paths of :meth:`MultiHeadAttention.attend`: the fused kernel when acting, and
    the path with a differentiable bias when training (mutation caught: the training path's queries
    left unscaled)."""
    torch.manual_seed(0)
    attn = build_attention("relative", D, H, DH, max_distance=M).double()
    with torch.no_grad():  # non-trivial u, v so terms (c) and (d) matter
        attn.position.u.normal_()
        attn.position.position_bias.normal_()
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    valid = torch.tensor([[False, True, True, True, True], [True] * M])
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[1, 4] = True
    mask = attention_mask(valid, starts, M)
    with torch.set_grad_enabled(grad):
        fast, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
    assert fast.requires_grad == grad
    with torch.no_grad():
        slow = naive_relative_attention(attn, h, memory, mask)
    torch.testing.assert_close(fast, slow, atol=1e-10, rtol=0)


def test_rel_shift_aligns_every_row_to_its_distances():
    K = M + T
    distances = torch.arange(K - 1, -1, -1.0)  # the raw layout: column k holds distance K-1-k
    raw = distances.expand(T, K).clone()
    shifted = rel_shift(raw)
    for i in range(T):
        for j in range(i + M + 1):  # every key not in the future
            assert shifted[i, j] == M + i - j


def test_content_attention_masks_memory_and_is_scaled_by_head_dim():
    torch.manual_seed(0)
    attn = build_attention("none", D, H, DH, max_distance=M).double()
    h, memory = torch.randn(1, 1, D, dtype=torch.float64), torch.randn(1, M, D, dtype=torch.float64)
    mask = torch.ones(1, 1, M + 1, dtype=torch.bool)
    mask[..., :2] = False
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask)
        q = attn.q_net(h).view(1, 1, H, DH).transpose(1, 2)  # [B, H, T, d_head]
        k, v = attn.keys_values(torch.cat([memory[:, 2:], h], dim=1))
        expected = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(DH), dim=-1) @ v
        expected = attn.out_net(expected.transpose(1, 2).reshape(1, 1, -1))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("name", list(ATTENTIONS))
def test_first_step_of_an_episode_has_no_nan(name):
    """Every memory slot invalid (episode start): the query still sees itself, output finite."""
    attn = make_attention(name, D, H, DH, max_distance=M)
    valid = torch.zeros(B, M, dtype=torch.bool)
    starts = torch.ones(B, T, dtype=torch.bool)  # every step starts a new one-step episode
    mask = attention_mask(valid, starts, M)
    assert mask.sum(-1).eq(1).all()
    out, _ = attn(torch.randn(B, T, D), attn.keys_values(torch.randn(B, M, D) * 1e6), mask, attn.position_terms())
    assert torch.isfinite(out).all()


def test_mask_is_banded_causal_and_episode_aware():
    valid = torch.ones(1, 3, dtype=torch.bool)
    starts = torch.tensor([[False, False, True, False]])
    mask = attention_mask(valid, starts, memory_length=3)[0].int()
    expected = torch.tensor([
        # memory m0 m1 m2 | segment s0 s1 s2 s3
        [1, 1, 1, 1, 0, 0, 0],  # s0 sees 3 memory slots and itself
        [0, 1, 1, 1, 1, 0, 0],  # s1: m0 is 4 steps back, outside the window
        [0, 0, 0, 0, 0, 1, 0],  # s2 starts an episode
        [0, 0, 0, 0, 0, 1, 1],
    ])
    assert torch.equal(mask, expected)


def test_window_before_rebuilds_states_by_index():
    memory = torch.arange(3.0).view(1, 3, 1)  # records of times -3, -2, -1
    valid = torch.tensor([[False, True, True]])
    records = torch.arange(10.0, 14.0).view(1, 4, 1)  # times 0..3
    starts = torch.tensor([[False, False, True, False]])
    windows, window_valid = window_before(memory, valid, records, starts, torch.arange(5))
    assert windows[0, :, :, 0].tolist() == [[0, 1, 2], [1, 2, 10], [2, 10, 11], [10, 11, 12], [11, 12, 13]]
    assert window_valid[0].int().tolist() == [[0, 1, 1], [1, 1, 1], [1, 1, 1], [0, 0, 1], [0, 1, 1]]


def test_the_episode_clock_counts_from_each_start():
    """Env 0 continues an episode at time 5 and starts one at step 2; env 1 starts at step 0 and again at 3."""
    starts = torch.tensor([[False, False, True, False], [True, False, False, True]])
    assert episode_clock(torch.tensor([5, 9]), starts).tolist() == [[5, 6, 0, 1], [0, 1, 2, 0]]


def test_a_state_without_its_clock_is_refused():
    """An episode-time backbone never runs without the time: a silent fallback would drop it."""
    backbone = make_backbone("gtrxl", 3, d_model=8, n_heads=2, memory_length=4, episode_time="sinusoidal")
    state = backbone.initial_state(2)
    del state["clock"]
    with pytest.raises(ValueError, match="encodes episode time.*no 'clock'"):
        backbone.step(torch.randn(2, 3), state, torch.ones(2, dtype=torch.bool))


def test_windows_that_share_little_are_handed_as_plain_windows():
    """Shared records only pay when windows overlap (``SHARED_RECORDS_MIN`` slots per distinct record)."""
    history = window_history(torch.randn(3, M, 2), torch.ones(3, M, dtype=torch.bool), torch.randn(3, 8, 2),
                             torch.zeros(3, 8, dtype=torch.bool))
    apart = shared_windows(history, torch.tensor([0, 1, 2]), torch.tensor([0, 4, 8]), M)
    steps = [0, 1, 2, 3] * 4  # 16 windows of 5 slots over 8 distinct records
    together = shared_windows(history, torch.zeros(16, dtype=torch.long), torch.tensor(steps), M)
    assert set(apart) == {"memory", "valid"} and set(together) == {"records", "slots", "valid"}
    for state, (env, t) in ((apart, ([0, 1, 2], [0, 4, 8])), (together, ([0] * 16, steps))):
        memory, valid = gather_windows(history, torch.tensor(env), torch.tensor(t), M)
        torch.testing.assert_close(windows(state), memory)
        assert torch.equal(state["valid"], valid)


def test_relative_position_terms_project_the_sinusoid_of_each_distance():
    """``W_kR R`` with ``R_d = [sin(d ω_i), cos(d ω_i)]``, ``ω_i = 10000^(-2i/D)``, distances descending."""
    attn = build_attention("relative", D, H, DH, max_distance=M).double()
    frequencies = 10000 ** (-torch.arange(0, D, 2.0, dtype=torch.float64) / D)
    for distance in (0, 3, M):
        R = torch.cat([torch.sin(distance * frequencies), torch.cos(distance * frequencies)])
        expected = (attn.position.r_net.weight @ R).view(H, DH)
        torch.testing.assert_close(attn.position_terms()[:, M - distance], expected)


def test_absolute_positional_encodings():
    positions = torch.tensor([1, 2])
    sinusoidal = SinusoidalPositionalEncoding(6, max_positions=4)(positions)
    frequencies = torch.tensor([1.0, 10000 ** (-1 / 3), 10000 ** (-2 / 3)])
    torch.testing.assert_close(sinusoidal[0, :3], torch.sin(frequencies))
    torch.testing.assert_close(sinusoidal[1, 3:], torch.cos(2 * frequencies))
    learned = LearnedPositionalEncoding(6, max_positions=8)
    torch.testing.assert_close(learned(positions), learned.table.weight[1:3])


def test_alibi_slopes_follow_press_et_al():
    """Powers of two: ``2^(−8h/n)``; otherwise the nearest power's slopes, then every other one of
    twice that power (Press et al. 2022). Mutation caught: a slope sequence starting at ``h = 0``."""
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -h for h in range(1, 9)]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8]))
    torch.testing.assert_close(alibi_slopes(6), torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8,
                                                              2.0 ** -1, 2.0 ** -3]))


def test_alibi_attention_equals_content_scores_minus_slope_times_distance():
    """``softmax(q_iᵀk_j/√d − m_h (i − j))`` written out per (query, key), with memory and episode starts."""
    torch.manual_seed(0)
    attn = build_attention("alibi", D, H, DH, max_distance=M).double()
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[0, 3] = True
    mask = attention_mask(torch.ones(B, M, dtype=torch.bool), starts, M)
    context = torch.cat([memory, h], dim=1)
    q = attn._heads(attn.q_net(h))
    k, v = attn.keys_values(context)
    expected = torch.zeros(B, H, T, DH, dtype=torch.float64)
    for b in range(B):
        for n in range(H):
            for i in range(T):
                scores = torch.stack([q[b, n, i] @ k[b, n, j] / math.sqrt(DH) - alibi_slopes(H)[n] * (M + i - j)
                                      if mask[b, i, j] else torch.tensor(float("-inf"), dtype=torch.float64)
                                      for j in range(M + T)])
                expected[b, n, i] = torch.softmax(scores, dim=0) @ v[b, n]
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        expected = attn.out_net(expected.transpose(1, 2).reshape(B, T, -1))
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)


def test_unknown_attention_names_the_valid_ones():
    with pytest.raises(ValueError, match="'rotary'.*valid attentions: ") as error:
        make_attention("rotary", D, H, DH, max_distance=M)
    assert all(name in str(error.value) for name in ATTENTIONS)


def test_strided_attention_equals_full_attention_with_the_pattern_mask():
    """Child et al. (2019): the last ``l`` steps and every ``l``-th one before, ``l = ⌈√M⌉`` (here M = 9,
    l = 3); equal to content attention given the pattern as its mask (mutation caught: no local band)."""
    torch.manual_seed(0)
    M9 = 9
    strided = build_attention("strided", D, H, DH, max_distance=M9).double()
    content = build_attention("none", D, H, DH, max_distance=M9).double()
    content.load_state_dict(strided.state_dict())
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M9, D, dtype=torch.float64)
    mask = attention_mask(torch.ones(B, M9, dtype=torch.bool), torch.zeros(B, T, dtype=torch.bool), M9)
    distance = torch.arange(T).view(-1, 1) + M9 - torch.arange(M9 + T).view(1, -1)
    pattern = torch.tensor([[d < 3 or d % 3 == 0 for d in row] for row in distance.tolist()])
    assert strided.pattern.stride == 3 and pattern[0, :M9 + 1].tolist() == [True, False, False, True, False, False,
                                                                        True, True, True, True]
    with torch.no_grad():
        out, _ = strided(h, strided.keys_values(memory), mask)
        expected, _ = content(h, content.keys_values(memory), mask & pattern)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_adaptive_span_of_full_length_equals_relative_attention():
    """ζ = 1 (the initial span, the whole memory): the soft mask is 1 on every visible key."""
    torch.manual_seed(0)
    span = build_attention("adaptive-span", D, H, DH, max_distance=M).double()
    relative = build_attention("relative", D, H, DH, max_distance=M).double()
    relative.load_state_dict({k: v for k, v in span.state_dict().items() if k != "pattern.span_fraction"})
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    mask = attention_mask(torch.ones(B, M, dtype=torch.bool), torch.zeros(B, T, dtype=torch.bool), M)
    with torch.no_grad():
        out, _ = span(h, span.keys_values(memory), mask, span.position_terms())
        expected, _ = relative(h, relative.keys_values(memory), mask, relative.position_terms())
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_adaptive_span_weights_follow_the_soft_mask():
    """``a_ij ∝ m_z(d) exp(s_ij)`` with ``m_z(d) = clamp((R + z − d)/R, 0, 1)`` (Sukhbaatar et al. 2019),
    here M = 9, R = 2 and spans of 3, 4.5 and 9 steps (mutation caught: a ramp that starts at z − R)."""
    torch.manual_seed(0)
    M9 = 9
    span = build_attention("adaptive-span", D, H, DH, max_distance=M9).double()
    relative = build_attention("relative", D, H, DH, max_distance=M9).double()
    relative.load_state_dict({k: v for k, v in span.state_dict().items() if k != "pattern.span_fraction"})
    with torch.no_grad():
        span.pattern.span_fraction.copy_(torch.tensor([3.0, 4.5, 9.0], dtype=torch.float64) / M9)
    assert span.pattern.ramp == 2 and span.pattern.spans().tolist() == [3.0, 4.5, 9.0]
    h, memory = torch.randn(1, 1, D, dtype=torch.float64), torch.randn(1, M9, D, dtype=torch.float64)
    mask = torch.ones(1, 1, M9 + 1, dtype=torch.bool)
    distance = torch.arange(M9, -1, -1.0, dtype=torch.float64)  # keys M9 .. 0 steps back
    with torch.no_grad():
        q = relative.queries(h)
        k, v = relative.keys_values(torch.cat([memory, h], dim=1))
        terms = relative.position_terms()
        scores = (relative.position.content_query(q, terms) @ k.transpose(-1, -2)) * relative.scale
        scores = scores + relative.position.score(q, terms, M9 + 1)
        ramp = ((2 + torch.tensor([3.0, 4.5, 9.0]).view(-1, 1) - distance) / 2).clamp(0, 1)  # [H, K]
        weights = ramp.unsqueeze(1) * scores.exp()  # [1, H, 1, K]
        expected = relative.merge((weights / weights.sum(-1, keepdim=True)) @ v)
        out, _ = span(h, span.keys_values(memory), mask, span.position_terms())
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)


def test_adaptive_span_penalty_and_task_loss_reach_the_span():
    """The penalty pulls every span in; the task loss moves a span whose ramp covers keys."""
    attn = build_attention("adaptive-span", D, H, DH, max_distance=M)
    with torch.no_grad():
        attn.pattern.span_fraction.fill_(0.5)
    penalty = attn.aux_terms()["span"]
    penalty.backward()
    assert (attn.pattern.span_fraction.grad > 0).all() and attn.aux_loss_coefs == {"span": 1e-3}
    attn.zero_grad()
    mask = attention_mask(torch.ones(B, M, dtype=torch.bool), torch.zeros(B, T, dtype=torch.bool), M)
    out, _ = attn(torch.randn(B, T, D), attn.keys_values(torch.randn(B, M, D)), mask, attn.position_terms())
    out.square().sum().backward()
    assert torch.isfinite(attn.pattern.span_fraction.grad).all() and attn.pattern.span_fraction.grad.abs().sum() > 0


def segment_with_a_start(attn, env: int, step: int):
    """A float64 segment, a full memory, the mask with one episode start, and the attention's queries,
    keys and values over ``[memory; segment]`` (for the naive references)."""
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[env, step] = True
    mask = attention_mask(torch.ones(B, M, dtype=torch.bool), starts, M)
    return h, memory, mask, attn.segment_qkv(h, attn.keys_values(memory))


def test_shaw_attention_equals_its_sums():
    """``e_ij = q_iᵀ(k_j + a^K_w)/√d``, ``z_i = Σ_j α_ij (v_j + a^V_w)``, ``w = min(i − j, k)`` written out per
    (query, key), with memory, an episode start and distances beyond the clip (set to 3 here, below
    M = 5, to exercise it). Mutation caught: leaving out the value term ``a^V``."""
    torch.manual_seed(0)
    attn = build_attention("shaw", D, H, DH, max_distance=M).double()
    attn.position.clip = 3
    with torch.no_grad():
        attn.position.key_positions.data = torch.randn(4, DH, dtype=torch.float64)
        attn.position.value_positions.data = torch.randn(4, DH, dtype=torch.float64)
    h, memory, mask, (q, k, v) = segment_with_a_start(attn, env=1, step=2)
    expected = torch.zeros(B, H, T, DH, dtype=torch.float64)
    for b in range(B):
        for n in range(H):
            for i in range(T):
                keys = [j for j in range(M + T) if mask[b, i, j]]
                w = [min(M + i - j, 3) for j in keys]
                pairs = list(zip(keys, w, strict=True))
                scores = torch.stack([q[b, n, i] @ (k[b, n, j] + attn.position.key_positions[c]) for j, c in pairs])
                alpha = torch.softmax(scores / math.sqrt(DH), dim=0)
                expected[b, n, i] = sum(a * (v[b, n, j] + attn.position.value_positions[c])
                                        for a, (j, c) in zip(alpha, pairs, strict=True))
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask)
        expected = attn.merge(expected)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)


def test_distance_aware_attention_equals_its_formula():
    """``A_ij = ReLU(q_iᵀk_j/√d)·(1 + e^v)/(1 + e^{v − w(i−j)})``, ``z_i = Σ_j A_ij v_j / Σ_j A_ij`` over the
    visible keys (Wu et al. 2021), with w of both signs. Mutation caught: ``e^{v + w(i−j)}``."""
    torch.manual_seed(0)
    attn = build_attention("distance-aware", D, H, DH, max_distance=M).double()
    with torch.no_grad():
        attn.position.distance_weight.copy_(torch.tensor([-0.5, 0.0, 0.7], dtype=torch.float64))
        attn.position.sigmoid_offset.copy_(torch.tensor([0.3, -1.0, 1.5], dtype=torch.float64))
    h, memory, mask, (q, k, v) = segment_with_a_start(attn, env=0, step=4)
    expected = torch.zeros(B, H, T, DH, dtype=torch.float64)
    for b in range(B):
        for n in range(H):
            w, o = attn.position.distance_weight[n], attn.position.sigmoid_offset[n]
            for i in range(T):
                keys = [j for j in range(M + T) if mask[b, i, j]]
                a = torch.stack([torch.relu(q[b, n, i] @ k[b, n, j] / math.sqrt(DH))
                                 * (1 + o.exp()) / (1 + (o - w * (M + i - j)).exp()) for j in keys])
                expected[b, n, i] = (a.unsqueeze(1) * v[b, n, keys]).sum(0) / (a.sum() + 1e-6)
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask)
        expected = attn.merge(expected)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=0)


@pytest.mark.parametrize("T", [1, 3])
def test_join_memory_gathers_shared_records_into_the_windows_and_their_gradients_back(T):
    """Shared records joined with the segment equal the gathered windows concatenated with it, and the
    gradient of every record is the sum over the window slots that hold it."""
    torch.manual_seed(0)
    N, M, R, H, d = 5, 4, 7, 2, 3
    table = torch.randn(R, H, d, requires_grad=True)
    slots = torch.randint(0, R, (N, M))
    segment = torch.randn(N, H, T, d, requires_grad=True)
    shared = SharedRecords(table, slots)
    joined, joined_again = join_memory((shared, shared), segment, segment)
    torch.testing.assert_close(joined_again, joined, rtol=0, atol=0)
    assert joined.shape == (N, H, M + T, d) and joined.is_contiguous()
    expected = torch.cat([table[slots].transpose(1, 2), segment], dim=2)
    torch.testing.assert_close(joined, expected, rtol=0, atol=0)
    weights = torch.randn(N, H, M + T, d)
    table_grad, segment_grad = torch.autograd.grad((joined * weights).sum(), (table, segment))
    summed = torch.zeros(R, H, d).index_add_(0, slots.flatten(), weights[:, :, :M].transpose(1, 2).flatten(0, 1))
    torch.testing.assert_close(table_grad, summed)
    torch.testing.assert_close(segment_grad, weights[:, :, M:])
    windows = expected[:, :, :M]
    for plain in join_memory((windows, windows), segment, segment):
        torch.testing.assert_close(plain, expected, rtol=0, atol=0)
