"""What a memory policy's decisions read: gradient saliency over an episode, attention maps, and recall distance.

- **Saliency** (as in POPGym Arcade, Wang et al. 2025): `S[t, k] = ‖∂ score(a_t) / ∂ o_k‖₂` for `k ≤ t`, where
  `o_k` is the `k`-th observation as the policy sees it (after SB3's preprocessing: one-hot codes, scaled pixels)
  and `score(a_t)` the logit of the action taken at `t` (for continuous actions the Gaussian's standardised mean,
  `Σ_i μ_i / σ_i`, which the deterministic action follows). The episode
  goes through the backbone's `forward_sequence` from a fresh state, with gradients through its memory; every
  decision step is a copy of the episode in the batch, so one backward pass gives a block of rows.
- **Attention maps**: the weights each attention layer and head puts on the steps of the episode, recorded by a
  forward hook on every `MultiHeadAttention` of the backbone (no entry point of the
  backbone changes). The hook recomputes the weights from the layer's own queries, keys, position scheme and key
  pattern, and keeps them only where they reproduce the layer's output: key patterns that read their keys their own
  way (compressed or retrieved memories, LSH buckets, Linformer's projected slots) are left out.
- **Recall distance**: for each step, the saliency-weighted mean of `t − k`: how far back the decision reaches.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.distributions import (
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
)
from stable_baselines3.common.preprocessing import preprocess_obs
from torch import Tensor

from policies.attention.layer import MultiHeadAttention, Pattern
from policies.window import key_distances

ROWS = 64
"""decision steps (copies of the episode) per backward pass"""


def action_scores(policy: Any, latent_pi: Tensor, actions: Tensor) -> Tensor:
    """`[N]`: the logit of each action taken (categorical actions); for continuous actions the Gaussian's mean in
    units of its standard deviation, `Σ_i μ_i / σ_i` (the log-probability of the mean, the deterministic action, has
    no gradient); else the log-probability. `actions` `[N, ...]` in the action space's shape."""
    distribution = policy._get_action_dist_from_latent(latent_pi)
    if isinstance(distribution, CategoricalDistribution):
        return distribution.distribution.logits.gather(-1, actions.long().view(-1, 1)).squeeze(-1)
    if isinstance(distribution, DiagGaussianDistribution):
        normal = distribution.distribution
        return (normal.mean / normal.stddev).sum(-1)
    flat = actions.reshape(len(actions), -1)  # Bernoulli's log-probability takes floats, a categorical's indices
    return distribution.log_prob(flat.float() if isinstance(distribution, BernoulliDistribution) else flat.long())


def _stacked(observations: list[Any]) -> Any:
    """The episode's observations as one batch (a dict of arrays for dict observations)."""
    if isinstance(observations[0], dict):
        return {key: np.stack([o[key] for o in observations]) for key in observations[0]}
    return np.stack(observations)


def saliency(policy: Any, observations: list[Any], actions: np.ndarray, rows: int = ROWS) -> np.ndarray:
    """`S` `[T, T]` of one episode (`observations[k]` as the env gave it, `actions[t]` as the policy took
    it): row `t` holds `‖∂ score(a_t) / ∂ o_k‖₂` for every `k`, exactly 0 for `k > t` (the future)."""
    policy.set_training_mode(False)
    obs, _ = policy.obs_to_tensor(_stacked(observations))
    seen = preprocess_obs(obs, policy.observation_space, normalize_images=policy.normalize_images)
    parts = seen if isinstance(seen, dict) else {"": seen}
    taken = torch.as_tensor(np.asarray(actions), device=policy.device)
    T = len(taken)
    out = np.zeros((T, T), dtype=np.float64)
    backbone = policy.backbone
    with torch.enable_grad():
        for first in range(0, T, rows):
            last = min(T, first + rows)
            n = last - first  # decision steps first … last − 1, each a copy of steps 0 … last − 1
            leaves = {key: part[:last].float().unsqueeze(1).expand(last, n, *part.shape[1:]).clone().requires_grad_()
                      for key, part in parts.items()}
            flat = {key: leaf.flatten(0, 1) for key, leaf in leaves.items()}
            features = policy.pi_features_extractor(flat if isinstance(seen, dict) else flat[""]).view(last, n, -1)
            starts = torch.zeros(last, n, dtype=torch.bool, device=policy.device)
            starts[0] = True
            y, _, _ = backbone.forward_sequence(features, backbone.initial_state(n), starts)  # [last, n, D]
            at_decision = y[torch.arange(first, last), torch.arange(n)]  # copy i's output at its step first + i
            score = action_scores(policy, policy.mlp_extractor.forward_actor(at_decision), taken[first:last]).sum()
            grads = torch.autograd.grad(score, list(leaves.values()), allow_unused=True)
            squared = sum(g.flatten(2).square().sum(-1) for g in grads if g is not None)  # [last, n]
            if isinstance(squared, Tensor):
                out[first:last, :last] = squared.sqrt().T.detach().cpu().double().numpy()
    return out


def recall_distance(saliency_map: np.ndarray) -> np.ndarray:
    """`[T]`: for each step `t`, `Σ_k S[t, k] (t − k) / Σ_k S[t, k]` (NaN where the saliency is all 0)."""
    T = saliency_map.shape[0]
    lag = np.arange(T)[:, None] - np.arange(T)[None, :]
    weights = np.where(lag >= 0, saliency_map, 0.0)
    total = weights.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (weights * lag).sum(axis=1) / total, np.nan)


@dataclass
class AttentionMap:
    """The weights of one call of an attention layer: `weights` `[B, H, T, K]` over `[memory; segment]`
    (`None` where they could not be recovered, `why` says why)."""

    layer: str
    weights: Tensor | None
    why: str = ""


def attention_weights(attn: MultiHeadAttention, h: Tensor, memory_kv: Any, mask: Tensor,
                      terms: Tensor | None) -> tuple[Tensor, Tensor]:
    """The softmax weights `[B, H, T, K]` of `attn` on `h` `[B, T, D]` over `[memory; segment]`, and the
    output `[B, T, D]` they give (for the check against the layer's own): the unfused path of
    `policies.attention.layer.attend` for a key pattern that reads through the kernel as it is."""
    q, k, v = attn.segment_qkv(h, memory_kv)
    T, K = q.shape[2], k.shape[2]
    mask = mask if mask.dim() == 4 else mask.unsqueeze(1)
    narrowed = attn.pattern.mask(T, K, q)
    mask = mask if narrowed is None else mask & narrowed
    mask = mask | (~mask.any(dim=-1, keepdim=True) & (key_distances(T, K, q.device) == 0))  # the kernel's own step
    q, k = attn.position.rotate(q, k)
    scores = (attn.position.content_query(q, terms) * attn.scale) @ k.transpose(-2, -1)
    for term in (attn.position.score(q, terms, K), attn.pattern.bias(q, k)):
        if term is not None:
            scores = scores + term
    weights = attn.position.weights(scores, mask)
    if weights is None:
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    out = weights @ v
    value_term = attn.position.values(weights, terms)
    return weights, attn.merge(out if value_term is None else out + value_term)


@contextmanager
def attention_maps(backbone: torch.nn.Module) -> Iterator[list[AttentionMap]]:
    """Record the weights of every attention layer of `backbone` while the block runs, call by call."""
    maps: list[AttentionMap] = []

    def record(name: str, attn: MultiHeadAttention, args: tuple[Any, ...], kwargs: dict[str, Any],
               output: Any) -> None:
        h, memory_kv, mask = args[:3]
        terms = args[3] if len(args) > 3 else kwargs.get("position_terms")
        if type(attn.pattern).read is not Pattern.read:
            maps.append(AttentionMap(name, None, f"attention {attn.pattern.name!r} reads its keys its own way (its "
                                                 "`read`), which the map does not recompute"))
            return
        with torch.no_grad():
            weights, out = attention_weights(attn, h, memory_kv, mask, terms)
        if torch.allclose(out, output[0], atol=1e-4, rtol=1e-4):
            maps.append(AttentionMap(name, weights.detach()))
        else:
            maps.append(AttentionMap(name, None, "the recomputed weights do not reproduce the layer's output"))

    handles = [module.register_forward_hook(lambda m, a, kw, o, name=name: record(name, m, a, kw, o),
                                            with_kwargs=True)
               for name, module in backbone.named_modules() if isinstance(module, MultiHeadAttention)]
    try:
        yield maps
    finally:
        for handle in handles:
            handle.remove()


def episode_attention(policy: Any, observations: list[Any]) -> list[AttentionMap]:
    """The attention maps of one episode fed to the actor's backbone at once from a fresh state, each cut to the
    episode's steps: `weights` `[H, T, T]` (query step × key step)."""
    policy.set_training_mode(False)
    obs, _ = policy.obs_to_tensor(_stacked(observations))
    T = len(observations)
    starts = torch.zeros(T, 1, dtype=torch.bool, device=policy.device)
    starts[0] = True
    seen = preprocess_obs(obs, policy.observation_space, normalize_images=policy.normalize_images)
    with torch.no_grad(), attention_maps(policy.backbone) as maps:
        features = policy.pi_features_extractor(seen).view(T, 1, -1)
        policy.backbone.forward_sequence(features, policy.backbone.initial_state(1), starts)
    return [AttentionMap(m.layer, None if m.weights is None else m.weights[0, :, :, -T:], m.why) for m in maps]
