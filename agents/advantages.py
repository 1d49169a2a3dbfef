"""Advantage normalisation that does not amplify what is left once a task is solved.

SB3 standardises advantages per minibatch, `Â = (A − mean A) / std A`. While a policy learns, `std A` is the
scale of its learning signal; once it solves a task, the advantages that remain are small errors of the value
function, often the same in every episode, and standardising them gives them the full scale of a learning signal.
The update then follows them at full step size, and a solved run can lose in one update what it learned (a
memory task's solved GTrXL that un-learns its read of the cue: docs/notes/learning-after-solving.md).

Here the divisor is never below the scale the run has sustained::

    Â = (A − mean A) / max(std A, σ̄),    σ̄_k = max(median(σ_{k−K+1}, …, σ_k), δ · σ̄_{k−1})

where σ_k is the standard deviation of the advantages of rollout k, K = `SUSTAINED_ROLLOUTS` (a median, so
that the critic's first, untrained rollouts do not set the scale) and δ the learner's `advantage_scale_decay`.
While the run learns, std A is at or above σ̄ and nothing changes; once the advantages shrink to the value
function's residue, they keep their small size. `δ = 0` is SB3's per-minibatch standardisation.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from torch import Tensor

SUSTAINED_ROLLOUTS = 5
"""K: the rollouts whose median advantage std is a sustained scale"""


def sustained_scale(previous: float, recent_stds: Sequence[float], decay: float) -> float:
    """σ̄ after a rollout: the median of the `recent_stds` (the last K rollouts') or `decay` · `previous`,
    whichever is larger; 0 when `decay` is 0 (no floor: SB3's standardisation)."""
    if decay == 0 or not recent_stds:
        return 0.0
    return max(statistics.median(recent_stds), decay * previous)


def normalized(advantages: Tensor, floor: float) -> Tensor:
    """`(A − mean A) / max(std A, floor)` over a minibatch (SB3's standardisation when `floor` is 0)."""
    scale = advantages.std().clamp(min=floor)
    return (advantages - advantages.mean()) / (scale + 1e-8)
