"""The losses of V-MPO (Song et al. 2020, "V-MPO: On-Policy Maximum a Posteriori Policy
Optimization for Discrete and Continuous Control"), as pure functions of tensors.

With advantages `A` of a batch `D` and its top half `D̃`:

- policy (Eq. 3): `L_π = −Σ_{D̃} ψ log π_θ(a|s)`, `ψ = softmax_{D̃}(A / η)` (η held constant);
- temperature (Eq. 4): `L_η = η ε_η + η log((1/|D̃|) Σ_{D̃} exp(A / η))`;
- trust region (Eq. 5): `L_α = α (ε_α − sg[KL̄]) + sg[α] KL̄`, `KL̄` = mean over the whole
  batch of `KL(π_old ‖ π_θ)`;
- Gaussian policies split the KL into a mean part and a covariance part with their own
  multipliers (MPO, Abdolmaleki et al. 2018).

Everything is computed with `logsumexp` so advantages of ±1e4 neither overflow nor underflow.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor


def top_half(advantages: Tensor) -> Tensor:
    """Indices of the `⌈N/2⌉` largest advantages; ties are broken by position (stable sort)."""
    order = torch.sort(advantages.detach(), descending=True, stable=True).indices
    return order[: math.ceil(advantages.numel() / 2)]


class PolicyLossStats(NamedTuple):
    loss: Tensor
    weights: Tensor  # ψ over the top half
    effective_sample_size: Tensor  # 1 / Σ ψ², between 1 and |D̃|


def policy_loss(log_prob_top: Tensor, advantages_top: Tensor, eta: Tensor) -> PolicyLossStats:
    """`L_π = −Σ ψ log π` with `ψ = softmax(A/η)`; neither `A` nor `η` get gradients here."""
    weights = torch.softmax(advantages_top.detach() / eta.detach(), dim=0)
    return PolicyLossStats(-(weights * log_prob_top).sum(), weights, 1.0 / weights.square().sum())


def temperature_loss(advantages_top: Tensor, eta: Tensor, epsilon_eta: float) -> Tensor:
    """`L_η = η ε_η + η (logsumexp(A/η) − log |D̃|)`, the convex dual of `KL(ψ ‖ p_D̃) < ε_η`."""
    scaled = advantages_top.detach() / eta
    return eta * epsilon_eta + eta * (torch.logsumexp(scaled, dim=0) - math.log(advantages_top.numel()))


def trust_region_loss(kl: Tensor, alpha: Tensor, epsilon_alpha: float) -> Tensor:
    """`L_α = α (ε_α − sg[KL̄]) + sg[α] KL̄` with `KL̄ = mean(kl)` over the whole batch."""
    mean_kl = kl.mean()
    return alpha * (epsilon_alpha - mean_kl.detach()) + alpha.detach() * mean_kl


def gaussian_kl_mean(mean_old: Tensor, std_old: Tensor, mean: Tensor) -> Tensor:
    """`KL_μ = ½ (μ − μ_old)ᵀ Σ_old⁻¹ (μ − μ_old)` for diagonal `Σ_old = σ_old²`, per sample."""
    return 0.5 * ((mean - mean_old).square() / std_old.square()).sum(dim=-1)


def gaussian_kl_covariance(std_old: Tensor, std: Tensor) -> Tensor:
    """`KL_Σ = ½ [tr(Σ⁻¹ Σ_old) − d + log(|Σ| / |Σ_old|)]` for diagonal covariances, per sample."""
    variance_old, variance = std_old.square(), std.square()
    return 0.5 * (variance_old / variance - 1.0 + torch.log(variance / variance_old)).sum(dim=-1)
