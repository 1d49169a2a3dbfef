"""The strided pattern of the Sparse Transformer (Child et al. 2019), registered as `strided`."""

from __future__ import annotations

from torch import Tensor

from policies.attention import ATTENTIONS
from policies.attention.layer import Pattern
from policies.window import key_distances, root_length


@ATTENTIONS.register("strided", "the Sparse Transformer's strided pattern, the last l steps and every l-th "
                                "(Child et al. 2019)")
class StridedPattern(Pattern):
    """The strided pattern of Child et al. (2019, Sec. 4.2): query `i` sees key `j` when `i − j < l`
    (the last `l` steps) or `(i − j) mod l = 0` (every `l`-th step before), with stride
    `l = ⌈√max_distance⌉`, the paper's `l ≈ √n`.

    Both conditions depend on the distance only, so rollout steps and training segments see the
    same keys (step equals sequence); the memory window still bounds the distance by `max_distance`.
    """

    complexity = "O(n·√n)"
    default_position = "none"

    def __init__(self, *, d_model: int, n_heads: int, d_head: int, max_distance: int) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, d_head=d_head, max_distance=max_distance)
        self.stride = root_length(max_distance)

    def allowed(self, distance: Tensor) -> Tensor:
        """Whether the pattern lets a query see a key `distance` steps back."""
        return (distance < self.stride) | (distance % self.stride == 0)

    def mask(self, n_queries: int, n_keys: int, like: Tensor) -> Tensor:
        distance = key_distances(n_queries, n_keys, like.device).clamp(min=0)  # future keys are masked
        return self.allowed(distance)
