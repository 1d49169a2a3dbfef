"""Byte counts of the activations a forward and backward pass keep, on any device torch's CPU allocator serves.

- `saved_activation_bytes`: the bytes autograd saves for backward (`saved_tensors_hooks`),
  the activations that reversible layers (Gomez et al. 2017) and chunked feed-forward (Kitaev et al.
  2020) exist to shrink.
- `peak_allocated_bytes`: the peak of the bytes allocated, above the level at entry, while a
  function runs, from the allocation and free events of `torch.profiler` with `profile_memory`
  (`tracemalloc` does not see torch's allocator). Everything the function allocates counts:
  activations, gradients, temporaries and workspaces.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import accumulate
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile


def saved_activation_bytes(forward: Callable[[], Any], parameters: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages autograd saves for backward while `forward()` runs, parameters
    left out: the activations a backward pass will need (views of one storage count once)."""
    excluded = {p.untyped_storage().data_ptr() for p in parameters}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in excluded:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    return sum(storages.values())


def peak_allocated_bytes(work: Callable[[], Any]) -> int:
    """The most bytes allocated at once by the CPU tensors `work()` creates, counting from zero at entry
    (freeing a tensor that existed before does not lower the count: the profiler does not see its size,
    and warns so); every thread's events count."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        work()
    events = sorted((event for event in profiler.profiler.kineto_results.events() if event.name() == "[memory]"),
                    key=lambda event: event.start_ns())
    return max(accumulate((event.nbytes() for event in events), initial=0))
