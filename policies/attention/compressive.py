"""Compressive memory (Rae et al. 2020) over the episode window, registered as `compressive`."""

from __future__ import annotations

import math
from typing import Annotated

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.rules import Count, CountOrNone, OneOf
from policies.attention import ATTENTIONS
from policies.attention.layer import Kernel, Pattern, Position, Slots, attend
from policies.options import checked
from policies.window import key_distances

DEFAULT_RATE = 4
"""``c``, the compression rate (steps per compressed slot); the paper used 3 and 4"""
FIFO_FRACTION = 5
"""the default FIFO part is the memory length divided by this: with ``c = 4``, a memory of 320 steps
holds 64 FIFO steps and 64 compressed slots"""
COMPRESSIONS = ("mean", "conv")
"""the compression functions ``f_c``: mean pooling, or a learned 1D convolution (kernel = stride = ``c``)"""
RECONSTRUCTION_LOSS_COEF = 1.0
"""default coefficient of the attention-reconstruction loss; it trains ``f_c`` alone, so it only sets its step size"""


@ATTENTIONS.register("compressive", "a FIFO of recent steps plus older blocks compressed into one slot each "
                                    "(Compressive Transformer, Rae et al. 2020)")
class CompressiveMemory(Pattern):
    """Attention over a FIFO memory plus a compressed memory (Rae et al. 2020, Sec. 3).

    A query sees the last `n_m = fifo_length` steps one by one, and the `n_cm` older blocks of
    `c = compression_rate` steps each as one slot. `compression` picks the function `f_c` that
    makes a slot's key and value from its block's: `mean` pooling, or `conv`, the paper's best, a
    learned 1D convolution with kernel and stride `c`, `f_c(x) = (c / n) Σ_s W_s x_s` per head over
    the block's `n` visible steps (`W_s = I / c` at the start, which is the mean). The convolution is
    trained only by the attention-reconstruction loss (Sec. 3.2), `‖attn(q, old) − attn(q, f_c(old))‖²`
    between content attention over each query's compressed steps and over its slots, with every input
    but `f_c` detached; the main loss does not reach `W` and the loss does not reach the model. It goes
    to the backbone's `aux` as `reconstruction`. Everything is one softmax over
    `[compressed slots; FIFO; segment]` in the kernel (`Slots`); a compressed
    slot is scored as a key at the distance `d` of its block's middle step (with `relative` positions
    `(q+u)ᵀk̄ + (q+v)ᵀW_kR R_d`), so with `c = 1` this is plain attention over `n_m + n_cm` steps.
    A position scheme must score a key from its distance alone (`refuses`). The window
    `max_distance = n_m + c·n_cm` bounds the reach.

    Where this differs from the paper, and why: blocks are cut relative to each query (block `j`
    holds the steps `n_m + j·c + 1 .. n_m + (j+1)·c` back) instead of once when steps leave the FIFO.
    The compressed memory is then a function of the window of records, so a rollout step and a
    training segment see the same memories without new state, and the episode boundary clears it
    with the window (step equals sequence; episode isolation). The convolution compresses keys and values per head, not
    the layer inputs, so a slot needs no second projection.
    """

    complexity = "O(n·(n_m + n_cm)), FIFO and compressed slots"

    @checked()
    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int,
                 fifo_length: CountOrNone = None, compression_rate: Count = DEFAULT_RATE,
                 compression: Annotated[str, OneOf(lambda: COMPRESSIONS)] = "mean") -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        if fifo_length is None:
            fifo_length = max(1, max_distance // FIFO_FRACTION)
        if not 1 <= fifo_length <= max_distance:
            raise ValueError(f"fifo_length must be in 1..{max_distance} (the memory length), got {fifo_length}")
        self.fifo_length, self.compression_rate, self.compression = fifo_length, compression_rate, compression
        self.n_compressed = math.ceil((max_distance - fifo_length) / compression_rate)
        if compression == "conv":
            mean = torch.eye(d_head).expand(n_heads, compression_rate, d_head, d_head) / compression_rate
            self.compress_keys = nn.Parameter(mean.clone())  # W_s per head: [H, c, d, d]
            self.compress_values = nn.Parameter(mean.clone())
            self.aux_loss_coefs = {"reconstruction": RECONSTRUCTION_LOSS_COEF}
        self._reconstruction: list[Tensor] = []

    def refuses(self, position: Position) -> str | None:
        if not position.scores_distances or not position.fused:
            return ("a compressed slot is a mean of keys at several distances, scored at its middle one: the position "
                    "must add a score term for a given distance and nothing else (relative, alibi or none)")
        return None

    def slot_distances(self, device: torch.device) -> Tensor:
        """The distance each compressed slot's position term is taken at (its block's middle step), `[n_cm]`."""
        c = self.compression_rate
        middle = self.fifo_length + torch.arange(self.n_compressed, device=device) * c + (c + 1) // 2
        return middle.clamp(max=self.max_distance)

    def blocks(self, q: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Each query's compressed blocks: the newest key index of each `[T, n_cm]`, and the first key
        each query may see `[B, T]` (visibility is `index ≥ first`)."""
        T, K = q.shape[2], mask.shape[-1]
        first = mask[:, 0].float().argmax(dim=-1)  # [B, T]: the oldest visible key of each query
        query_index = torch.arange(T, device=q.device) + (K - T)  # the query's own key index
        j = torch.arange(self.n_compressed, device=q.device)
        return query_index.view(-1, 1) - self.fifo_length - j * self.compression_rate - 1, first

    def compress(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, *,
                 detached: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """`f_c` of every query's compressed blocks: keys and values `[B, H, T, n_cm, d]` each, and
        which slots hold at least one visible step `[B, 1, T, n_cm]`. `detached`: the convolution's
        weights without gradient (the main attention's use, Rae et al.'s stop-gradient)."""
        B, H, T, _ = q.shape
        K, c = k.shape[2], self.compression_rate
        newest, first = self.blocks(q, mask)
        oldest = torch.maximum(newest - c + 1, first.unsqueeze(-1))  # [B, T, n_cm]
        newest = newest.expand(B, T, -1)
        counts = (newest - oldest + 1).clamp(min=0)  # visible steps per block
        visible = (counts > 0).unsqueeze(1)
        if self.compression == "conv":
            steps = newest.unsqueeze(-1) - torch.arange(c, device=q.device)  # [B, T, n_cm, c], newest first
            seen = (steps >= first.view(B, T, 1, 1)).to(k.dtype).view(B, 1, T, -1, c, 1)
            scale = (c / counts.clamp(min=1).to(k.dtype)).view(B, 1, T, -1, 1)
            index = steps.clamp(min=0).view(B, 1, -1, 1)

            def convolve(x: Tensor, weight: Tensor) -> Tensor:
                block = x.gather(2, index.expand(-1, H, -1, x.shape[-1])).view(B, H, T, -1, c, x.shape[-1])
                weight = weight.detach() if detached else weight
                return torch.einsum("bhtjsd,hsde->bhtje", block * seen, weight) * scale

            return convolve(k, self.compress_keys), convolve(v, self.compress_values), visible

        def block_means(x: Tensor) -> Tensor:  # a block's sum is a difference of prefix sums
            prefix = F.pad(x.cumsum(dim=2), (0, 0, 1, 0))  # [B, H, K + 1, d]: prefix[i] = Σ_{<i}
            upper = (newest + 1).clamp(min=0).view(B, 1, -1, 1).expand(-1, H, -1, x.shape[-1])
            lower = oldest.clamp(min=0, max=K).view(B, 1, -1, 1).expand(-1, H, -1, x.shape[-1])
            sums = (prefix.gather(2, upper) - prefix.gather(2, lower)).view(B, H, T, -1, x.shape[-1])
            return sums / counts.clamp(min=1).to(x.dtype).view(B, 1, T, -1, 1)

        return block_means(k), block_means(v), visible

    def reconstruction_loss(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """Rae et al.'s attention-reconstruction loss: the squared error between content attention over
        each query's compressed steps one by one and over its slots, averaged over the queries that have
        any; only `f_c` gets its gradient."""
        q, k, v = q.detach(), k.detach(), v.detach()
        region = mask & (key_distances(q.shape[2], k.shape[2], q.device) > self.fifo_length)  # [B, 1, T, K]
        k_c, v_c, visible = self.compress(q, k, v, mask)
        old = attend(q, k, v, region, scale=self.scale)  # content attention over the compressed steps
        compressed = attend(q, k, v, torch.zeros_like(region), scale=self.scale, slots=Slots(k_c, v_c, visible))
        has_old = visible.any(dim=-1, keepdim=True)  # [B, 1, T, 1]; the kernel gives 0 to a query without any
        has_old = has_old.squeeze(-1)  # [B, 1, T]
        error = (old - compressed).square().mean(dim=-1)  # [B, H, T]
        return (error * has_old).sum() / (has_old.sum() * q.shape[1]).clamp(min=1)

    def aux_terms(self) -> dict[str, Tensor]:
        """The reconstruction loss of the training passes since the last call (`conv` only; 0 when none ran)."""
        if self.compression != "conv":
            return {}
        losses, self._reconstruction = self._reconstruction, []
        return {"reconstruction": torch.stack(losses).mean() if losses else self.compress_keys.new_zeros(())}

    def read(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, kernel: Kernel) -> Tensor:
        """One softmax over `[compressed slots; FIFO; segment]`: the window's keys at most `n_m` steps back
        and every query's `n_cm` compressed slots, scored at their blocks' middle distances."""
        fifo = mask & (key_distances(q.shape[2], k.shape[2], q.device) <= self.fifo_length)
        k_c, v_c, visible = self.compress(q, k, v, mask, detached=True)
        if self.compression == "conv" and self.training and torch.is_grad_enabled():
            self._reconstruction.append(self.reconstruction_loss(q, k, v, mask))
        return kernel(q, k, v, fifo, slots=Slots(k_c, v_c, visible, self.slot_distances(q.device)))
