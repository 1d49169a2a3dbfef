"""Local attention (``local``) and Memorizing Transformer attention (``knn``) against their references,
and the top-k rule."""

from __future__ import annotations

import pytest
import torch
from conftest import build_attention

from policies.attention.knn import top_k_keys
from policies.attention.layer import MultiHeadAttention
from policies.window import attention_mask

B, M, T, D, H, DH = 2, 6, 5, 12, 3, 4
WINDOW = 2


def inputs(starts: torch.Tensor | None = None):
    torch.manual_seed(1)
    h, memory = torch.randn(B, T, D, dtype=torch.float64), torch.randn(B, M, D, dtype=torch.float64)
    valid = torch.tensor([[False] + [True] * (M - 1), [True] * M])
    starts = torch.zeros(B, T, dtype=torch.bool) if starts is None else starts
    mask = attention_mask(valid, starts, M)
    older = (torch.arange(T).view(-1, 1) + M - torch.arange(M + T).view(1, -1)) > WINDOW
    return h, memory, mask, older


def knn(top_k: int, gate_logit: float) -> MultiHeadAttention:
    torch.manual_seed(0)
    attn = build_attention("knn", D, H, DH, max_distance=M, local_window=WINDOW, top_k=top_k).double()
    with torch.no_grad():
        attn.pattern.gate_logit.fill_(gate_logit)
    return attn


def test_a_closed_gate_leaves_relative_attention_over_the_local_window():
    """``g = 0``: Transformer-XL attention restricted to the last ``W`` steps (mutation caught: the
    local half seeing the whole store)."""
    attn = knn(top_k=1, gate_logit=float("-inf"))
    relative = build_attention("relative", D, H, DH, max_distance=M).double()
    relative.load_state_dict({k: v for k, v in attn.state_dict().items() if k != "pattern.gate_logit"})
    h, memory, mask, older = inputs()
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        expected, _ = relative(h, relative.keys_values(memory), mask & ~older, relative.position_terms())
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_retrieving_the_whole_store_equals_content_attention_over_the_older_keys():
    """``k`` ≥ store size and ``g = 1``: plain softmax attention over every older key of the episode,
    without position terms (mutations caught: retrieving local keys too, adding the position bias)."""
    attn = knn(top_k=M + T, gate_logit=float("inf"))
    content = build_attention("none", D, H, DH, max_distance=M).double()
    content.load_state_dict({k: v for k, v in attn.state_dict().items() if k in content.state_dict()})
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[1, 3] = True  # env 1's last two steps start an episode: nothing older to retrieve
    h, memory, mask, older = inputs(starts)
    has_memory = (mask & older).any(-1)
    assert has_memory.sum() == B * T - 2
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        expected, _ = content(h, content.keys_values(memory), mask & older | ~has_memory.unsqueeze(-1))
    torch.testing.assert_close(out[has_memory], expected[has_memory], atol=1e-12, rtol=0)


def test_one_retrieved_key_gives_its_value():
    """``k = 1``, ``g = 1``: each query reads the value of its best-scoring older key alone (mutation
    caught: attending to every older key)."""
    attn = knn(top_k=1, gate_logit=float("inf"))
    content = build_attention("none", D, H, DH, max_distance=M).double()
    content.load_state_dict({k: v for k, v in attn.state_dict().items() if k in content.state_dict()})
    h, memory, mask, older = inputs()
    with torch.no_grad():
        out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        q, k, _ = content.segment_qkv(h, content.keys_values(memory))
        scores = (q @ k.transpose(-1, -2)).masked_fill(~(mask & older).unsqueeze(1), float("-inf"))
        best = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, scores.argmax(-1, keepdim=True), True)
        heads = torch.softmax(scores.masked_fill(~best, float("-inf")), -1) @ content.segment_qkv(
            h, content.keys_values(memory))[2]
    torch.testing.assert_close(out, content.merge(heads), atol=1e-12, rtol=0)


def test_a_query_with_nothing_older_uses_the_local_half_alone():
    """Early in an episode there is no older key: the output is the local attention whatever the gate."""
    h, memory, mask, older = inputs(torch.ones(B, T, dtype=torch.bool))  # every step a new episode
    assert not (mask & older).any()
    with torch.no_grad():
        open_gate, closed = knn(top_k=1, gate_logit=5.0), knn(top_k=1, gate_logit=float("-inf"))
        out, _ = open_gate(h, open_gate.keys_values(memory), mask, open_gate.position_terms())
        expected, _ = closed(h, closed.keys_values(memory), mask, closed.position_terms())
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("k", [1, 3, 20])
def test_top_k_keeps_the_k_best_allowed_keys(k):
    torch.manual_seed(0)
    scores, allowed = torch.randn(4, 3, 10), torch.rand(4, 3, 10) > 0.3
    kept = top_k_keys(scores, allowed, k)
    for row_scores, row_allowed, row_kept in zip(scores.view(-1, 10), allowed.view(-1, 10), kept.view(-1, 10),
                                                 strict=True):
        best = sorted((s for s, a in zip(row_scores.tolist(), row_allowed.tolist(), strict=True) if a),
                      reverse=True)[:k]
        assert sorted(row_scores[row_kept].tolist(), reverse=True) == best


def test_top_k_ranks_tied_keys_by_their_place_and_keeps_exactly_k():
    """Among equal scores the older keys win, and never more than ``k`` are kept (mutation caught:
    keeping every key tied at the ``k``-th place)."""
    scores = torch.tensor([[0.5, 0.5, 2.0, 0.5, 0.5, 0.5]])
    allowed = torch.tensor([[True, True, True, True, False, True]])
    assert top_k_keys(scores, allowed, 3).tolist() == [[True, True, True, False, False, False]]
    assert top_k_keys(scores, allowed, 5).tolist() == [[True, True, True, True, False, True]]


def test_retrieval_does_not_depend_on_how_many_identical_older_records_there_are():
    """One distinct record (the cue) and a run of identical ones beyond the local window: with ``g = 1``
    the output of the last query is the same for a run of 3 and of 30 (the T-Maze corridor), as long as
    the cue is among the ``k`` best. Keeping every tied key would average over the whole run."""
    torch.manual_seed(3)
    cue, corridor = torch.randn(1, 1, D, dtype=torch.float64), torch.randn(1, 1, D, dtype=torch.float64)
    outputs = []
    for run in (3, 30):
        attn = build_attention("knn", D, H, DH, max_distance=run + 1 + WINDOW, local_window=WINDOW, top_k=2).double()
        torch.manual_seed(0)
        for parameter in attn.parameters():
            parameter.data.copy_(torch.randn_like(parameter))
        with torch.no_grad():
            attn.pattern.gate_logit.fill_(float("inf"))
            attn.queries = lambda h, attn=attn: attn.keys_values(cue.expand_as(h))[0]  # the query looks for the cue
        memory = torch.cat([cue, corridor.expand(1, run + WINDOW, D)], dim=1)
        h = corridor.clone()
        valid = torch.ones(1, run + 1 + WINDOW, dtype=torch.bool)
        mask = attention_mask(valid, torch.zeros(1, 1, dtype=torch.bool), run + 1 + WINDOW)
        with torch.no_grad():
            out, _ = attn(h, attn.keys_values(memory), mask, attn.position_terms())
        outputs.append(out)
    torch.testing.assert_close(outputs[0], outputs[1], atol=1e-12, rtol=0)


def test_bad_options_name_the_valid_range():
    with pytest.raises(ValueError, match="local_window must be in 1..6.*got 7"):
        build_attention("knn", D, H, DH, max_distance=M, local_window=7)
    with pytest.raises(ValueError, match="top_k=0: expected an integer >= 1"):
        build_attention("knn", D, H, DH, max_distance=M, top_k=0)
