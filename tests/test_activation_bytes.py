"""The byte counts the tests and benchmarks share: activation bytes saved for backward and peak allocation."""

from __future__ import annotations

import torch

from experiments.activation_bytes import peak_allocated_bytes, saved_activation_bytes


def test_saved_bytes_count_each_activation_storage_once_and_leave_parameters_out():
    x = torch.randn(1000, requires_grad=True)

    def sine_and_cosine_of_a_double() -> torch.Tensor:
        h = x * 2  # 4,000 bytes that sin and cos both save
        return h.sin() + h.cos()

    assert saved_activation_bytes(lambda: x.sin(), [x]) == 0
    assert saved_activation_bytes(sine_and_cosine_of_a_double, [x]) == 4000
    assert saved_activation_bytes(lambda: x.sin(), []) == 4000


def test_peak_allocated_bytes_follows_allocations_and_frees():
    existing = [torch.empty(250_000)]

    def allocate_free_allocate() -> None:
        first, second = torch.empty(250_000), torch.empty(500_000)  # 1 MB and 2 MB at once
        del first, second
        torch.empty(500_000)

    assert peak_allocated_bytes(allocate_free_allocate) == 3_000_000
    # freeing what existed before does not lower the count: only what work() allocates is seen
    assert peak_allocated_bytes(lambda: (existing.pop(), torch.empty(250_000))) == 1_000_000
