"""Linformer attention (Wang et al. 2020), made causal by projecting along distances; registered as `linformer`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.rules import CountOrNone
from policies.attention import ATTENTIONS
from policies.attention.layer import Kernel, Pattern, Position, Slots
from policies.options import checked
from policies.window import key_distances

DEFAULT_RANK = 16
"""``k``, the number of projected keys per query (at most ``M + 1``); the paper used 64–256 for ``n = 512``"""


def block_projection(rank: int, window: int) -> Tensor:
    """`[rank, window]`: row `r` averages the `r`-th of `rank` contiguous, near-equal runs of the
    distances `0..window − 1` (`d` belongs to run `⌊d·rank/window⌋`); the identity when `rank = window`."""
    runs = torch.arange(window) * rank // window
    one_hot = F.one_hot(runs, rank).T.to(torch.get_default_dtype())
    return one_hot / one_hot.sum(dim=1, keepdim=True)


@ATTENTIONS.register("linformer", "k keys projected along distances, made causal (Linformer, Wang et al. 2020)")
class LinformerProjection(Pattern):
    """Linformer's low-rank attention (Wang et al. 2020, Eq. 7), `head = softmax(Q (E K)ᵀ/√d) (F V)`,
    with learned `k × n` projections `E`, `F` per head, made causal for a memory.

    The paper projects the `n` keys of a sequence at once, so every query would see the future. Here
    the projection is indexed by distance: query `i`'s window is the keys `0..M` steps back
    (`M = max_distance`), and its `k = rank` projected keys and values are

        `k̃_i[r] = Σ_d E[r, d] · m_i(d) · k_{i−d}`,  `ṽ_i[r] = Σ_d F[r, d] · m_i(d) · v_{i−d}`,  `r < k`,

    with `m_i(d)` the memory mask (same episode, within the window, not in the future): a masked key
    adds nothing, so a step and a training segment see the same projections and nothing from before
    an episode start leaks in (step equals sequence; episode isolation). The output is
    `Σ_r softmax_r(q_iᵀk̃_i[r]/√d) ṽ_i[r]`.
    The projection depends on the distance, so it carries order: no position terms are added (the paper
    uses absolute positions at the input, which engram's memories do not have). A projected key with
    no visible key behind it (early in an episode) is a zero vector: score 0, value 0; the softmax over
    the `k` slots is always defined, so no NaN.

    `E` and `F` start as block means: slot `r` averages the `r`-th of `k` contiguous runs of
    distances (`block_projection`), so the query sees its whole window from the start, pooled
    nearest first; with `k = M + 1` the attention starts as plain softmax attention (`none`) wherever the
    whole window is visible (each masked distance adds an empty slot, weight `e⁰`, value 0).

    Cost: each query has its own projections, so Linformer's sharing of `E K` between queries does not
    carry over: `O((M + 1)·k·d)` per query and head for forming `k̃`, `ṽ`, handed to the kernel as per-query slots
    (`Slots`).
    """

    complexity = "O(n·k), k the projected length"
    default_position = "none"

    @checked()
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 rank: CountOrNone = None) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        window = max_distance + 1
        if rank is None:
            rank = min(DEFAULT_RANK, window)
        if not 1 <= rank <= window:
            raise ValueError(f"rank must be in 1..{window} (the distances 0..{max_distance} of the window), "
                             f"got {rank}")
        self.rank = rank
        blocks = block_projection(rank, window)
        self.key_projection = nn.Parameter(blocks.repeat(n_heads, 1, 1))  # E, [H, k, M + 1]
        self.value_projection = nn.Parameter(blocks.repeat(n_heads, 1, 1))  # F, [H, k, M + 1]

    def by_key(self, projection: Tensor, n_queries: int, n_keys: int) -> Tensor:
        """`E` or `F` laid out over the keys of `[memory; segment]`: `[H, k, T, K]`, entry
        `[h, r, i, j] = P[h, r, i − j]` (distances outside `0..M` are clamped; the mask hides them)."""
        distances = key_distances(n_queries, n_keys, projection.device).clamp(0, self.max_distance)
        return projection[:, :, distances]

    def refuses(self, position: Position) -> str | None:
        if position.contributes:
            return ("its k projected keys each mix keys of every distance in the window, so no per-distance position "
                    "term applies (the distance-indexed projection already carries order); use position 'none'")
        return None

    def read(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, kernel: Kernel) -> Tensor:
        """The kernel over every query's `k` projected keys `k̃_i[r] = Σ_d E[r, d] m_i(d) k_{i−d}` and values
        `ṽ_i[r]` (slots, all visible: an empty one scores 0 and adds 0), and none of the window's own."""
        T, K = q.shape[2], k.shape[2]
        visible = mask.unsqueeze(2).to(k.dtype)  # m_i(d), [B, 1, 1, T, K]
        keys = torch.einsum("bhrtk,bhkd->bhtrd", self.by_key(self.key_projection, T, K) * visible, k)  # k̃
        values = torch.einsum("bhrtk,bhkd->bhtrd", self.by_key(self.value_projection, T, K) * visible, v)  # ṽ
        slots = Slots(keys, values, torch.ones(*mask.shape[:3], self.rank, dtype=torch.bool, device=q.device))
        return kernel(q, k, v, torch.zeros_like(mask), slots=slots)
