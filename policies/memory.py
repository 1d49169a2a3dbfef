"""Episode memory as a sliding window of per-step records.

Every backbone's state is a dict of tensors with the env axis first:

- ``memory``: ``[B, M, *record]``, the records of the last ``M`` steps, oldest first. A
  record is what one time step leaves behind for the future: the per-layer inputs of a
  Transformer-XL (``[L, D]``), the ``(h, c)`` carry of an LSTM (window of one), the raw
  features of a frame stack.
- ``valid``: ``[B, M]`` bool, which slots belong to the episode of the most recent step.
- keys starting with ``cache_`` hold values derived from ``memory`` with the current
  parameters (attention keys and values). They only speed up ``step``; learners drop them
  when they store a state (:func:`strip_cache`) and backbones rebuild them when missing.

A step is processed in three moves, shared by every backbone: episode starts invalidate
the window (:func:`reset_window`), the step reads the valid slots, and its record is pushed
(:func:`push_window`). Training rebuilds the window before any step of a stored rollout
from the window at the rollout start plus the per-step records (:func:`window_before`):
no per-step copies of the window are ever stored.
"""

from __future__ import annotations

import torch
from torch import Tensor

State = dict[str, Tensor]

CACHE_PREFIX = "cache_"


def empty_window(n_envs: int, memory_length: int, record_shape: tuple[int, ...], *,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> State:
    """A window with no valid slot: the state of ``n_envs`` fresh episodes."""
    return {
        "memory": torch.zeros(n_envs, memory_length, *record_shape, device=device, dtype=dtype),
        "valid": torch.zeros(n_envs, memory_length, dtype=torch.bool, device=device),
    }


def reset_window(valid: Tensor, episode_start: Tensor) -> Tensor:
    """Invalidate every slot of the envs whose episode starts now. ``episode_start``: ``[B]``."""
    return valid & ~episode_start.bool().view(-1, 1)


def push_window(window: Tensor, item: Tensor) -> Tensor:
    """Drop the oldest slot of ``window`` ``[B, M, ...]`` and append ``item`` ``[B, ...]``."""
    if window.shape[1] == 0:
        return window
    return torch.cat([window[:, 1:], item.unsqueeze(1).to(window.dtype)], dim=1)


def strip_cache(state: State) -> State:
    """The state without derived caches: what a learner stores."""
    return {k: v for k, v in state.items() if not k.startswith(CACHE_PREFIX)}


def episode_ids(episode_starts: Tensor) -> Tensor:
    """Index of the episode each step belongs to, counted from the segment start.

    ``episode_starts``: ``[B, T]``; the result is ``[B, T]`` int, 0 for steps of the episode
    that was running when the segment began.
    """
    return episode_starts.long().cumsum(dim=1)


def window_before(memory: Tensor, valid: Tensor, records: Tensor, episode_starts: Tensor,
                  t: Tensor) -> tuple[Tensor, Tensor]:
    """The window entering step ``t`` of a segment, rebuilt from records by index.

    Args:
        memory: ``[B, M, *record]`` the window when the segment began, ``valid`` ``[B, M]``.
        records: ``[B, T, *record]`` the record each step of the segment pushed.
        episode_starts: ``[B, T]`` episode-start flags of the segment.
        t: ``[N]`` or ``[B, N]`` step indices in ``0..T`` (``T`` gives the state after the segment).

    Returns:
        ``(memory_t, valid_t)`` of shapes ``[B, N, M, *record]`` and ``[B, N, M]``: the state
        *before* ``episode_starts[t]`` is applied, exactly what ``step`` would have received.
        A slot is valid when its record was valid and no episode started after it, up to and
        including step ``t - 1``.
    """
    B, M = valid.shape
    T = records.shape[1]
    if t.dim() == 1:
        t = t.unsqueeze(0).expand(B, -1)
    history = torch.cat([memory, records.to(memory.dtype)], dim=1)  # [B, M+T, *record]
    base_valid = torch.cat([valid, valid.new_ones(B, T)], dim=1)  # [B, M+T]
    # episode counter at every slot of the history: 0 on the memory, cumsum on the segment
    counter = torch.cat([episode_ids(episode_starts).new_zeros(B, M), episode_ids(episode_starts)], dim=1)
    slots = t.unsqueeze(-1) + torch.arange(M, device=t.device)  # [B, N, M] indices into history
    flat = slots.reshape(B, -1)
    gathered = history.gather(1, _expand_index(flat, history)).reshape(*slots.shape, *history.shape[2:])
    # the episode that the most recent step (t - 1) belongs to; history index of step t-1 is M+t-1
    last = counter.gather(1, (M + t - 1).clamp(min=0))  # [B, N]
    last = torch.where(t > 0, last, torch.zeros_like(last))
    slot_valid = base_valid.gather(1, flat).view_as(slots) & (counter.gather(1, flat).view_as(slots)
                                                              == last.unsqueeze(-1))
    return gathered, slot_valid


def _expand_index(index: Tensor, source: Tensor) -> Tensor:
    """Broadcast a ``[B, N]`` time index over the trailing record dimensions of ``source``."""
    extra = source.shape[2:]
    return index.view(*index.shape, *([1] * len(extra))).expand(*index.shape, *extra)


def attention_mask(valid: Tensor, episode_starts: Tensor, memory_length: int) -> Tensor:
    """Which keys of ``[memory; segment]`` each query of the segment may attend to.

    Query ``i`` (segment step ``i``) sees exactly the window ``step`` would give it: the last
    ``memory_length`` steps of its own episode, plus itself. With ``M = memory_length``:

    - memory slot ``k`` (time ``k - M``): valid, no episode start in ``0..i``, distance
      ``M + i - k <= M``;
    - segment step ``j``: ``j <= i``, same episode, ``i - j <= M``.

    The diagonal is always allowed, so no row is fully masked.

    Args:
        valid: ``[B, M_state]`` validity of the memory window (``M_state`` is the number of
            memory slots actually supplied; it may exceed ``memory_length`` for segment
            training with a longer cache, but is usually equal).
        episode_starts: ``[B, T]``.

    Returns:
        ``[B, T, M_state + T]`` bool, ``True`` where attention is allowed.
    """
    B, M_state = valid.shape
    T = episode_starts.shape[1]
    device = valid.device
    episode = episode_ids(episode_starts)  # [B, T]
    query_time = torch.arange(T, device=device) + M_state  # absolute index of each query
    key_time = torch.arange(M_state + T, device=device)
    distance = query_time.view(T, 1) - key_time.view(1, -1)  # [T, M_state+T]
    in_band = (distance >= 0) & (distance <= memory_length)
    key_episode = torch.cat([episode.new_zeros(B, M_state), episode], dim=1)  # [B, M_state+T]
    key_valid = torch.cat([valid, valid.new_ones(B, T)], dim=1)
    same_episode = key_episode.unsqueeze(1) == episode.unsqueeze(2)  # [B, T, M_state+T]
    return in_band.unsqueeze(0) & same_episode & key_valid.unsqueeze(1)
