"""The position-scheme interface, and ``none``: no position information."""

from __future__ import annotations

from torch import Tensor, nn

from policies.attention.kernel import HeadProjections, score_scale
from policies.positions import POSITIONS


@POSITIONS.register("none", "no position information: content attention only (order shows through the memory's "
                            "content alone)")
class Position(nn.Module):
    """What a position scheme may contribute to :func:`policies.attention.kernel.attend`; this base
    contributes nothing (``none``). A scheme overrides the hooks it needs:

    - :meth:`terms`: tensors computed from its parameters once per pass (cached during rollouts);
    - :meth:`rotate`: queries and keys before scoring (RoPE);
    - :meth:`content_query`: the query that multiplies the content keys (``q + u`` in Transformer-XL);
    - :meth:`score`: an additive score term ``[B or 1, H, T, K]``, already scaled;
    - :meth:`distance_score`: the same term for keys at given distances (a memory kind's per-query slots);
    - :meth:`values`: an additive value term (Shaw, absolute);
    - :meth:`weights`: a normaliser in place of the softmax (DA-Transformer).

    ``fused``: whether the score is all it adds, so torch's fused softmax kernel can compute the attention.
    ``softmax``: whether its weights are a softmax of the scores (not with :meth:`weights`).
    ``scores_distances``: whether :meth:`distance_score` is defined (a compressed slot has a distance).
    ``contributes``: whether it adds anything at all.
    """

    fused = True
    softmax = True
    scores_distances = True
    contributes = False
    name: str

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__()
        self.n_heads, self.d_head, self.max_distance = n_heads, d_head, max_distance
        self.scale = score_scale(d_head)

    def terms(self, projections: HeadProjections) -> Tensor | None:
        """What the scheme computes from its parameters (and the attention's ``projections``) once per pass."""
        return None

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Queries ``[B, H, T, d]`` and keys ``[B, H, K, d]`` as the scores see them."""
        return q, k

    def content_query(self, q: Tensor, terms: Tensor | None) -> Tensor:
        """The query that multiplies the content keys."""
        return q

    def score(self, q: Tensor, terms: Tensor | None, n_keys: int) -> Tensor | None:
        """The additive score term of queries ``q`` over the ``n_keys`` keys of ``[memory; segment]``."""
        return None

    def distance_score(self, q: Tensor, terms: Tensor | None, distances: Tensor | None) -> Tensor | None:
        """The additive score term ``[B or 1, H, T, J]`` of keys at ``distances`` ``[J]`` from every query."""
        return None

    def values(self, weights: Tensor, terms: Tensor | None) -> Tensor | None:
        """An additive output term ``[B, H, T, d]`` from the attention ``weights`` ``[B, H, T, K]``."""
        return None

    def weights(self, scores: Tensor, mask: Tensor) -> Tensor | None:
        """Attention weights from the ``scores`` and ``mask`` in place of the softmax (``None``: the softmax)."""
        return None
