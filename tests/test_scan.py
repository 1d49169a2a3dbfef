"""The parallel scan of ``h_t = a_t ⊙ h_{t−1} + b_t`` (``policies/backbones/scan.py``) against the recurrence
step by step: every length (powers of two and not), real and complex, exact resets where ``a_t = 0``, and gradients
(mutations caught: the carry entering at ``t = 1``, the padding steps leaking into the last step, a level that
drops the odd steps' composition)."""

from __future__ import annotations

import pytest
import torch

from policies.backbones.scan import linear_scan


def loop(a: torch.Tensor, b: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    out = []
    for t in range(b.shape[0]):
        h = a[t] * h + b[t]
        out.append(h)
    return torch.stack(out)


@pytest.mark.parametrize("T", [1, 2, 3, 5, 8, 13, 16, 37])
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_scan_equals_the_recurrence(T, dtype):
    torch.manual_seed(T)
    a, b, h = torch.rand(T, 3, 4, dtype=dtype), torch.randn(T, 3, 4, dtype=dtype), torch.randn(3, 4, dtype=dtype)
    torch.testing.assert_close(linear_scan(a, b, h), loop(a, b, h), atol=1e-12, rtol=0)


def test_scan_broadcasts_a_and_clears_exactly_where_a_is_zero():
    torch.manual_seed(0)
    T = 11
    a, b, h = torch.rand(T, 2, 1), torch.randn(T, 2, 5), torch.randn(2, 5)
    a[4, 0] = 0.0  # env 0 starts an episode at t = 4
    out = linear_scan(a, b, h)
    torch.testing.assert_close(out, loop(a.expand_as(b), b, h), atol=1e-5, rtol=0)
    moved = linear_scan(a, torch.cat([b[:4] + 100.0, b[4:]]), h + 100.0)  # everything before the start changed
    assert torch.equal(moved[4:, 0], out[4:, 0])


def test_scan_gradients_equal_the_recurrence():
    torch.manual_seed(1)
    inputs = [torch.rand(13, 3, dtype=torch.float64, requires_grad=True),
              torch.randn(13, 3, dtype=torch.float64, requires_grad=True),
              torch.randn(3, dtype=torch.float64, requires_grad=True)]
    weights = torch.randn(13, 3, dtype=torch.float64)
    grads = [torch.autograd.grad((f(*inputs) * weights).sum(), inputs) for f in (linear_scan, loop)]
    for scanned, looped in zip(*grads, strict=True):
        torch.testing.assert_close(scanned, looped, atol=1e-12, rtol=0)
