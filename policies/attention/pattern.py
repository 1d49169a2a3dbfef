"""The key-pattern interface, and ``full``: every key of the window."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from policies.attention import ATTENTIONS
from policies.attention.kernel import score_scale
from policies.positions.base import Position

Kernel = Callable[..., Tensor]
""":func:`policies.attention.kernel.attend` with the layer's position scheme, its terms, scale and dropout bound"""


@ATTENTIONS.register("full", "every key of the memory window (Transformer-XL's dense window, Dai et al. 2019)")
class Pattern(nn.Module):
    """Which keys a query sees, and how they exist; this base sees the whole window (``full``). A key pattern
    overrides :meth:`mask` (a hard mask from distances), :meth:`episode_pattern` (a hard mask from episode
    times, with ``uses_episode_time``) or :meth:`bias` (a soft one); a memory kind overrides :meth:`read`,
    which calls the kernel on the keys it makes. :meth:`refuses` names the position schemes it cannot take.

    ``default_position``: the position scheme the pattern takes when the backbone names none (the one its
    registered attention used before the axes were split, so old settings keep their meaning).
    """

    complexity = "O(n²)"
    """the time its paper claims for a sequence of ``n`` tokens (here every windowed member scores its ``M + T``
    keys densely and masks them: ``benchmarks/attention_scaling.py``)"""
    default_position = "relative"
    uses_episode_time = False
    """whether the pattern restricts keys by the queries' episode time (:meth:`episode_pattern`); the backbone
    then keeps the episode clock in its state and narrows the mask with it"""
    shared_qk = False
    """whether keys are the normalised queries (:class:`~policies.attention.kernel.HeadProjections`)"""
    aux_loss_coefs: dict[str, float] = {}
    """default coefficients of the losses among :meth:`aux_terms`"""
    name: str

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.max_distance = n_heads, d_head, max_distance
        self.scale = score_scale(d_head)

    @property
    def reach(self) -> int:
        """The farthest key, in steps back, that can change a query's output (the memory length here)."""
        return self.max_distance

    def refuses(self, position: Position) -> str | None:
        """Why ``position`` cannot combine with this pattern (``None``: it can)."""
        return None

    def episode_pattern(self, clock: Tensor, n_keys: int) -> Tensor:
        """``[B, T, K]`` (or ``[B, H, T, K]``, per head): which keys of ``[memory; segment]`` the queries at
        episode times ``clock`` ``[B, T]`` may see (only with ``uses_episode_time``)."""
        raise NotImplementedError(f"attention {self.name!r} is not laid out in episode time")

    def mask(self, n_queries: int, n_keys: int, like: Tensor) -> Tensor | None:
        """``[T, K]``: which keys of ``[memory; segment]`` the pattern lets each query see (``None``: all)."""
        return None

    def bias(self, q: Tensor, k: Tensor) -> Tensor | None:
        """A soft pattern: an additive, already scaled term of the ``[B, H, T, K]`` scores (``None``: none)."""
        return None

    def aux_terms(self) -> dict[str, Tensor]:
        """Scalar losses and statistics of the pattern's own parameters (e.g. a span penalty), added to the
        backbone's ``aux`` in training (none here)."""
        return {}

    def read(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, kernel: Kernel) -> Tensor:
        """The per-head outputs ``[B, H, T, d]`` of queries ``q`` over the window's keys ``k`` and values ``v``
        under the memory ``mask`` ``[B, 1 or H, T, K]``: the kernel with the pattern's mask and bias."""
        narrowed = self.mask(q.shape[2], k.shape[2], q)
        return kernel(q, k, v, mask if narrowed is None else mask & narrowed, bias=self.bias(q, k))
