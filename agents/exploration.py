"""An exploration floor for on-policy learners: act with `μ = (1 − ε)·π + ε·U(A)`.

PPO's clipped ratio `π_θ(a)/π_old(a)` lets an action's probability grow by at most a factor
`1 + clip` per update, and an action whose probability has collapsed to ~0 is no longer
sampled at all: a memory task whose decision step was settled on a no-op early (T-Maze's
junction, where "right" and the wrong goal both score 0) stays there, because nothing that
PPO computes moves probability back. Acting with the mixture `μ` keeps every action sampled
with probability `≥ ε/|A|` (the on-policy counterpart of the ε = 1/T exploration of Ni et al.
2023), and measuring the ratio against `μ` (the distribution the data came from) makes the
trust region additive: after one update `π_θ(a)` may reach `(1 + clip)·ε/|A|` however small
`π_old(a)` was. The learner stores `log π_old(a)` as usual (the rollout-recomputation check
compares against it) and `log μ(a)` beside it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.distributions import (
    BernoulliDistribution,
    CategoricalDistribution,
    Distribution,
    MultiCategoricalDistribution,
)
from torch import Tensor

FINITE = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def check_action_space(action_space: spaces.Space, option: str) -> None:
    """Raise unless `option` (the floor or the barrier) is defined for `action_space`."""
    if not isinstance(action_space, FINITE):
        names = ", ".join(space.__name__ for space in FINITE)
        raise ValueError(f"{option} needs a finite action space ({names}); "
                         f"got {type(action_space).__name__}: set {option}=0")


def _log_probs(distribution: Distribution) -> list[Tensor]:
    """`log π` per action dimension, each `[B, n]` (a Bernoulli bit is a two-way choice)."""
    if isinstance(distribution, CategoricalDistribution):
        return [distribution.distribution.logits]
    if isinstance(distribution, MultiCategoricalDistribution):
        return [d.logits for d in distribution.distribution]
    if isinstance(distribution, BernoulliDistribution):
        logits = distribution.distribution.logits
        return list(torch.stack([F.logsigmoid(-logits), F.logsigmoid(logits)], dim=-1).unbind(1))
    raise ValueError(f"no finite action distribution: {type(distribution).__name__}")


def _mixtures(distribution: Distribution, epsilon: float) -> list[Tensor]:
    """The probabilities of `μ` per action dimension, each `[B, n]`."""
    return [(1 - epsilon) * log_p.exp() + epsilon / log_p.shape[-1] for log_p in _log_probs(distribution)]


def behaviour_sample(distribution: Distribution, epsilon: float) -> tuple[Tensor, Tensor]:
    """Sample actions from `μ = (1 − ε)·π + ε·U(A)`; returns them (`[B]` for one categorical
    dimension, `[B, dims]` otherwise, like SB3's actions) and `log μ(a)` `[B]`."""
    mixtures = _mixtures(distribution, epsilon)
    choices = [torch.multinomial(probs, 1).squeeze(-1) for probs in mixtures]
    actions = choices[0] if isinstance(distribution, CategoricalDistribution) else torch.stack(choices, dim=-1)
    return actions, _log_prob(mixtures, choices)


def _log_prob(mixtures: list[Tensor], choices: list[Tensor]) -> Tensor:
    """`Σ_d log μ_d(a_d)` over the action dimensions."""
    return torch.stack([probs.gather(-1, a.unsqueeze(-1)).squeeze(-1).log()
                        for probs, a in zip(mixtures, choices, strict=True)]).sum(0)


def uniform_kl(distribution: Distribution) -> Tensor:
    """`KL(U ‖ π) = −log|A| − (1/|A|)·Σ_a log π(a)` per sample `[B]`: a log-barrier (Agarwal et al. 2020)."""
    return torch.stack([-math.log(log_p.shape[-1]) - log_p.mean(-1) for log_p in _log_probs(distribution)]).sum(0)
