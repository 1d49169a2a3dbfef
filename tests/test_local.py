"""The sliding window (policies/attention/local.py): the full window under a band of the mask."""

from __future__ import annotations

import pytest
import torch
from conftest import attention_inputs, build_attention

from policies.window import key_distances

B, M, T, D, H, DH = 2, 6, 5, 12, 3, 4


@pytest.mark.parametrize("window", [1, 2, M])
def test_local_attention_equals_the_full_window_with_a_band_mask(window):
    """Keys at most ``W`` steps back, the query itself included (mutation caught: ``<`` for ``≤``)."""
    torch.manual_seed(0)
    local = build_attention("local", D, H, DH, max_distance=M, local_window=window).double()
    full = build_attention("relative", D, H, DH, max_distance=M).double()
    full.load_state_dict(local.state_dict())
    h, memory, mask = attention_inputs(T, D, M)
    band = torch.tensor([[0 <= M + i - j <= window for j in range(M + T)] for i in range(T)])
    assert torch.equal(local.pattern.mask(T, M + T, h), key_distances(T, M + T, h.device) <= window)
    with torch.no_grad():
        out, _ = local(h, local.keys_values(memory), mask, local.position_terms())
        expected, _ = full(h, full.keys_values(memory), mask & band, full.position_terms())
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)


def test_a_window_outside_the_memory_is_refused():
    with pytest.raises(ValueError, match=f"local_window must be in 1..{M} \\(the memory length\\), got 7"):
        build_attention("local", D, H, DH, max_distance=M, local_window=7)
