"""Compressive memory (``compressive``) against plain relative attention and a per-query reference."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import build_attention

from policies.attention.layer import MultiHeadAttention, sinusoid_table
from tests.conftest import attention_inputs

B, T, D, H, DH = 2, 5, 12, 3, 4


def inputs(M: int):
    return attention_inputs(T, D, M)


def test_compression_rate_one_is_a_longer_fifo():
    """``c = 1``: every compressed slot is one step at its own distance, so the attention equals
    Transformer-XL attention over the whole window (mutations caught: a slot's position term taken at
    the wrong distance, blocks shifted by one step)."""
    M = 7
    torch.manual_seed(0)
    attn = build_attention("compressive", D, H, DH, max_distance=M, fifo_length=2, compression_rate=1).double()
    with torch.no_grad():  # non-trivial u and v
        attn.position.u.normal_()
        attn.position.position_bias.normal_()
    relative = build_attention("relative", D, H, DH, max_distance=M).double()
    relative.load_state_dict(attn.state_dict())
    h, memory, mask = inputs(M)
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        expected, _ = relative(h, relative.keys_values(memory), mask, relative.position_terms())
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def naive_slot(x, weight, steps: list[int], key_index: list[int]):
    """``f_c`` of one block, written out: the mean of its visible steps (``weight`` None), or
    ``(c/n) Σ_s x_s W_s`` with ``s`` the step's offset from the block's newest step."""
    if weight is None:
        return x[key_index].mean(0)
    return sum(x[j] @ weight[s] for s, j in zip(steps, key_index, strict=True)) * weight.shape[0] / len(key_index)


def naive_compressive(attn: MultiHeadAttention, h, memory, mask):
    """One softmax per query over its FIFO steps and ``f_c`` of its visible older blocks, written out."""
    M, f, c = attn.max_distance, attn.pattern.fifo_length, attn.pattern.compression_rate
    context = torch.cat([memory, h], dim=1)
    q_all = attn.queries(h)
    k_all, v_all = attn.keys_values(context)
    r = attn.position.r_net(sinusoid_table(torch.arange(M + 1, dtype=h.dtype), D)).view(M + 1, H, DH)  # W_kR R_d
    u, v_bias = attn.position.u, attn.position.position_bias
    compress_values = getattr(attn.pattern, "compress_values", None)
    out = torch.zeros(B, H, T, DH, dtype=h.dtype)
    for b in range(B):
        for n in range(H):
            for i in range(T):
                q = q_all[b, n, i]
                scores, values = [], []
                for j in range(M + T):  # FIFO and segment steps
                    distance = M + i - j
                    if mask[b, i, j] and distance <= f:
                        scores.append((q + u[n]) @ k_all[b, n, j] + (q + v_bias[n]) @ r[distance, n])
                        values.append(v_all[b, n, j])
                for slot in range(math.ceil((M - f) / c)):
                    block = [(d - f - slot * c - 1, M + i - d) for d in range(f + slot * c + 1, f + (slot + 1) * c + 1)
                             if M + i - d >= 0 and mask[b, i, M + i - d]]
                    if block:
                        steps, keys = [s for s, _ in block], [j for _, j in block]
                        conv = attn.pattern.compression == "conv"
                        k_slot = naive_slot(k_all[b, n], attn.pattern.compress_keys[n] if conv else None, steps, keys)
                        middle = min(f + slot * c + (c + 1) // 2, M)
                        scores.append((q + u[n]) @ k_slot + (q + v_bias[n]) @ r[middle, n])
                        values.append(naive_slot(v_all[b, n], compress_values[n] if conv else None, steps, keys))
                weights = torch.softmax(torch.stack(scores) / math.sqrt(DH), dim=0)
                out[b, n, i] = weights @ torch.stack(values)
    return attn.merge(out)


@pytest.mark.parametrize("fifo_length,rate", [(2, 2), (3, 4)])
def test_compressed_slots_are_the_means_of_their_blocks(fifo_length, rate):
    """Blocks of ``c`` steps beyond the FIFO, each the mean of its visible steps (a partial last block,
    an episode start inside a block), one softmax with the FIFO (mutations caught: counting hidden steps
    in a block's mean, a FIFO one step too long, sums instead of means)."""
    M = 9
    torch.manual_seed(0)
    attn = build_attention("compressive", D, H, DH, max_distance=M, fifo_length=fifo_length,
                           compression_rate=rate).double()
    h, memory, mask = inputs(M)
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        expected = naive_compressive(attn, h, memory, mask)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def conv_attention(M: int, fifo_length: int, rate: int, *, random_weights: bool) -> MultiHeadAttention:
    torch.manual_seed(0)
    attn = build_attention("compressive", D, H, DH, max_distance=M, fifo_length=fifo_length, compression_rate=rate,
                                compression="conv").double()
    if random_weights:
        with torch.no_grad():
            attn.pattern.compress_keys.normal_(std=0.5)
            attn.pattern.compress_values.normal_(std=0.5)
    return attn


@pytest.mark.parametrize("fifo_length,rate", [(2, 2), (3, 4)])
def test_a_fresh_convolution_is_mean_pooling(fifo_length, rate):
    """``W_s = I/c`` and the ``c/n`` rescaling of partial blocks: a fresh ``conv`` equals ``mean`` (mutations
    caught: no rescaling of blocks cut by an episode start, a missing 1/c)."""
    M = 9
    conv = conv_attention(M, fifo_length, rate, random_weights=False)
    mean = build_attention("compressive", D, H, DH, max_distance=M, fifo_length=fifo_length,
                           compression_rate=rate).double()
    mean.load_state_dict(conv.state_dict(), strict=False)
    h, memory, mask = inputs(M)
    with torch.no_grad():
        out, _ = conv(h, conv.keys_values(memory), mask, conv.position_terms())
        expected, _ = mean(h, mean.keys_values(memory), mask, mean.position_terms())
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("fifo_length,rate", [(2, 2), (3, 4)])
def test_learned_compression_is_a_convolution_over_each_block(fifo_length, rate):
    """Random ``W``: every slot is ``(c/n) Σ_s x_s W_s`` over its visible steps, ``s`` counted from the block's
    newest step (mutations caught: the kernel applied oldest-first, hidden steps not zeroed)."""
    M = 9
    attn = conv_attention(M, fifo_length, rate, random_weights=True)
    h, memory, mask = inputs(M)
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        expected = naive_compressive(attn, h, memory, mask)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def naive_reconstruction(attn: MultiHeadAttention, h, memory, mask):
    """``‖attn(q, old) − attn(q, f_c(old))‖²`` per query with compressed steps, content attention, written out."""
    M, f, c = attn.max_distance, attn.pattern.fifo_length, attn.pattern.compression_rate
    q_all = attn.queries(h)
    k_all, v_all = attn.keys_values(torch.cat([memory, h], dim=1))
    errors = []
    for b in range(B):
        for i in range(T):
            per_head = []
            for n in range(H):
                q = q_all[b, n, i]
                old = [M + i - d for d in range(f + 1, M + 1) if M + i - d >= 0 and mask[b, i, M + i - d]]
                if not old:
                    break
                raw = torch.softmax(k_all[b, n, old] @ q / math.sqrt(DH), 0) @ v_all[b, n, old]
                keys, values = [], []
                for slot in range(math.ceil((M - f) / c)):
                    block = [(d - f - slot * c - 1, M + i - d) for d in range(f + slot * c + 1, f + (slot + 1) * c + 1)
                             if M + i - d >= 0 and mask[b, i, M + i - d]]
                    if block:
                        steps, index = [s for s, _ in block], [j for _, j in block]
                        keys.append(naive_slot(k_all[b, n], attn.pattern.compress_keys[n], steps, index))
                        values.append(naive_slot(v_all[b, n], attn.pattern.compress_values[n], steps, index))
                weights = torch.softmax(torch.stack(keys) @ q / math.sqrt(DH), 0)
                per_head.append((raw - weights @ torch.stack(values)).square().mean())
            if per_head:
                errors.append(torch.stack(per_head).mean())
    return torch.stack(errors).mean()


def test_the_reconstruction_loss_trains_the_compression_alone():
    """Rae et al.'s attention-reconstruction loss: its value matches the written-out one, its gradient
    reaches ``W`` and nothing else, and the main output's gradient does not reach ``W`` (mutations caught:
    an undetached key, value or query; ``W`` left undetached in the main attention)."""
    M = 9
    attn = conv_attention(M, 2, 3, random_weights=True).train()
    h, memory, mask = inputs(M)
    h.requires_grad_(True)
    out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
    loss = attn.aux_terms()["reconstruction"]
    torch.testing.assert_close(loss, naive_reconstruction(attn, h, memory, mask), atol=1e-12, rtol=0)
    compression = [attn.pattern.compress_keys, attn.pattern.compress_values]
    others = [p for p in attn.parameters() if all(p is not w for w in compression)]
    grads = torch.autograd.grad(loss, compression + others + [h], allow_unused=True)
    assert all(g is not None and g.abs().sum() > 0 for g in grads[:2])
    assert all(g is None or g.abs().sum() == 0 for g in grads[2:])
    main = torch.autograd.grad(out.sum(), compression, allow_unused=True)
    assert all(g is None or g.abs().sum() == 0 for g in main)
    assert attn.aux_terms()["reconstruction"].item() == 0.0  # consumed: the next call starts afresh


def test_no_reconstruction_loss_outside_training():
    attn = conv_attention(9, 2, 3, random_weights=True).eval()
    h, memory, mask = inputs(9)
    attn(h, attn.keys_values(memory), mask, attn.position_terms())
    assert attn.aux_terms()["reconstruction"].item() == 0.0


def test_bad_compression_options_name_the_valid_range():
    with pytest.raises(ValueError, match="fifo_length must be in 1..9.*got 10"):
        build_attention("compressive", D, H, DH, max_distance=9, fifo_length=10)
    with pytest.raises(ValueError, match="compression_rate=0: expected an integer >= 1"):
        build_attention("compressive", D, H, DH, max_distance=9, compression_rate=0)
    with pytest.raises(ValueError, match="compression='max': expected one of mean, conv"):
        build_attention("compressive", D, H, DH, max_distance=9, compression="max")
