"""The SB3 actor-critic policy with a memory backbone between features and heads.

observation → SB3 features extractor (flatten / NatureCNN / combined Dict extractor) →
memory backbone (episode memory) → SB3 ``MlpExtractor`` → action and value heads.
"""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.distributions import (
    BernoulliDistribution,
    CategoricalDistribution,
    DiagGaussianDistribution,
    Distribution,
    MultiCategoricalDistribution,
)
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import CombinedExtractor, MlpExtractor, NatureCNN
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import Tensor

from policies.backbone import Aux, MemoryBackbone
from policies.popart import PopArtValueHead
from policies.registry import BACKBONES, make_backbone
from policies.window import State

PolicyState = dict[str, State]


class PolicyStep(NamedTuple):
    """What one rollout step of the policy produces."""

    actions: Tensor
    values: Tensor
    log_prob: Tensor
    state: PolicyState
    distribution: Distribution  # SB3 reuses this object: read it before the policy runs again


class MemoryActorCriticPolicy(ActorCriticPolicy):
    """SB3's ``ActorCriticPolicy`` with a recurrent memory backbone (``policies.registry``).

    The backbone is built in ``_build_mlp_extractor``, outside the modules that SB3's
    ``ortho_init`` re-initialises, so GTrXL gate biases and attention initialisations are kept,
    and it is part of ``self.parameters()`` when the optimizer is created. Actor and critic
    share the backbone by default (gradients of both losses reach it, as in CleanRL's
    PPO-TrXL); ``share_backbone=False`` gives the critic a backbone of its own.

    The state is ``{"pi": backbone_state}`` (plus ``"vf"`` with a separate critic backbone).
    ``predict(obs, state, episode_start)`` takes and returns it as NumPy arrays, like
    sb3-contrib's recurrent policies.

    :param backbone: name in ``policies.registry.BACKBONES``.
    :param backbone_kwargs: options of that backbone (``make_backbone``).
    :param share_backbone: one backbone for actor and critic.
    :param popart: a PopArt value head (:mod:`policies.popart`) with statistics step size ``popart_beta``.
    Other parameters are those of SB3's ``ActorCriticPolicy``.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Schedule, *,
                 backbone: str = "gtrxl", backbone_kwargs: dict[str, Any] | None = None,
                 share_backbone: bool = True, popart: bool = False, popart_beta: float = 1e-3,
                 **kwargs: Any) -> None:
        if not kwargs.get("share_features_extractor", True):
            raise ValueError("MemoryActorCriticPolicy needs share_features_extractor=True; "
                             "use share_backbone=False for a separate critic memory")
        if kwargs.get("use_sde", False):
            raise ValueError("gSDE (use_sde=True) is not supported by memory policies")
        if "features_extractor_class" not in kwargs:
            if isinstance(observation_space, spaces.Dict):
                kwargs["features_extractor_class"] = CombinedExtractor
            elif is_image_space(observation_space):
                kwargs["features_extractor_class"] = NatureCNN
        adam = kwargs.get("optimizer_class", torch.optim.Adam) is torch.optim.Adam
        if adam and kwargs.get("optimizer_kwargs") is None:
            kwargs["optimizer_kwargs"] = {"eps": 1e-5, "foreach": True}  # SB3's eps; one kernel per op on CPU too
        self.backbone_name = backbone
        # every option, defaults included: what is saved with the policy never depends on later defaults
        self.backbone_kwargs = (BACKBONES[backbone].resolve(backbone_kwargs or {}) if backbone in BACKBONES
                                else dict(backbone_kwargs or {}))
        self.share_backbone = share_backbone
        self.popart, self.popart_beta = popart, popart_beta
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def _build(self, lr_schedule: Schedule) -> None:
        super()._build(lr_schedule)
        if self.popart:  # wraps the same nn.Linear, so the optimizer already holds its parameters
            self.value_net = PopArtValueHead(self.value_net, beta=self.popart_beta)

    def _build_mlp_extractor(self) -> None:
        self.backbone = make_backbone(self.backbone_name, self.features_dim, **self.backbone_kwargs)
        self.critic_backbone = (None if self.share_backbone
                                else make_backbone(self.backbone_name, self.features_dim, **self.backbone_kwargs))
        self.mlp_extractor = MlpExtractor(self.backbone.output_dim, net_arch=self.net_arch,
                                          activation_fn=self.activation_fn, device=self.device)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(backbone=self.backbone_name, backbone_kwargs=self.backbone_kwargs,
                    share_backbone=self.share_backbone, popart=self.popart, popart_beta=self.popart_beta)
        return data

    # -- memory --------------------------------------------------------------------------
    def _backbones(self) -> dict[str, MemoryBackbone]:
        return {"pi": self.backbone} if self.critic_backbone is None else {"pi": self.backbone,
                                                                           "vf": self.critic_backbone}

    def initial_state(self, n_envs: int) -> PolicyState:
        """The state of ``n_envs`` new episodes."""
        return {name: backbone.initial_state(n_envs) for name, backbone in self._backbones().items()}

    def records(self, state: PolicyState) -> dict[str, Tensor]:
        """The record each backbone pushed at the step that produced ``state`` (for the buffer)."""
        return {name: s["memory"][:, -1] for name, s in state.items() if s["memory"].shape[1] > 0}

    def _latents_step(self, obs: PyTorchObs, state: PolicyState, episode_starts: Tensor
                      ) -> tuple[Tensor, Tensor, PolicyState]:
        features = self.extract_features(obs)
        latent_pi, pi_state = self.backbone.step(features, state["pi"], episode_starts)
        new_state = {"pi": pi_state}
        if self.critic_backbone is None:
            latent_vf = latent_pi
        else:
            latent_vf, new_state["vf"] = self.critic_backbone.step(features, state["vf"], episode_starts)
        return self.mlp_extractor.forward_actor(latent_pi), self.mlp_extractor.forward_critic(latent_vf), new_state

    # -- acting ----------------------------------------------------------------------------
    def forward(self, obs: PyTorchObs, state: PolicyState, episode_starts: Tensor,  # type: ignore[override]
                deterministic: bool = False) -> PolicyStep:
        """One rollout step: actions, values, log-probabilities, the next state and the distribution."""
        latent_pi, latent_vf, new_state = self._latents_step(obs, state, episode_starts)
        distribution = self._get_action_dist_from_latent(latent_pi)
        actions = distribution.get_actions(deterministic=deterministic)
        log_prob = distribution.log_prob(actions)
        return PolicyStep(actions.reshape((-1, *self.action_space.shape)), self.value_net(latent_vf), log_prob,
                          new_state, distribution)

    def distribution_params(self, distribution: Distribution) -> Tensor:
        """All parameters of an action distribution as one ``[B, P]`` tensor: logits (categorical,
        multi-categorical, Bernoulli) or mean and log-std (diagonal Gaussian)."""
        torch_dist = distribution.distribution
        if isinstance(distribution, DiagGaussianDistribution):
            return torch.cat([torch_dist.mean, torch_dist.stddev.log()], dim=-1)
        if isinstance(distribution, MultiCategoricalDistribution):
            return torch.cat([d.logits for d in torch_dist], dim=-1)
        if isinstance(distribution, CategoricalDistribution | BernoulliDistribution):
            return torch_dist.logits
        raise ValueError(f"unsupported action distribution {type(distribution).__name__}")

    def distribution_from_params(self, params: Tensor) -> Distribution:
        """The distribution that :meth:`distribution_params` flattened, as a new object (SB3's
        ``proba_distribution`` overwrites and returns ``self.action_dist``)."""
        distribution = copy.copy(self.action_dist)
        if isinstance(distribution, DiagGaussianDistribution):
            mean, log_std = params.chunk(2, dim=-1)
            return distribution.proba_distribution(mean, log_std)
        return distribution.proba_distribution(action_logits=params)

    def get_distribution(self, obs: PyTorchObs, state: PolicyState,  # type: ignore[override]
                         episode_starts: Tensor) -> tuple[Distribution, PolicyState]:
        latent_pi, _, new_state = self._latents_step(obs, state, episode_starts)
        return self._get_action_dist_from_latent(latent_pi), new_state

    def predict_values(self, obs: PyTorchObs, state: PolicyState,  # type: ignore[override]
                       episode_starts: Tensor) -> Tensor:
        """Values of ``obs`` as the next step of ``state`` (the state itself is not advanced)."""
        return self.value_net(self._latents_step(obs, state, episode_starts)[1])

    # -- training --------------------------------------------------------------------------
    def evaluate_segments(self, obs: PyTorchObs, actions: Tensor, state: PolicyState, episode_starts: Tensor
                          ) -> tuple[Tensor, Distribution, Aux]:
        """Recompute ``N`` stored segments of ``T`` steps with gradients.

        ``obs`` and ``actions`` are flattened time-major (``[T·N, ...]``), ``episode_starts`` is
        ``[T, N]`` and ``state`` holds the window entering each segment (as windows or as shared
        records, :func:`policies.window.shared_windows`). Returns the values
        ``[T·N]``, the action distribution and the backbones' auxiliary terms (critic
        backbone entries prefixed ``vf/``).
        """
        T, N = episode_starts.shape
        features = self.extract_features(obs)
        features = features.view(T, N, -1)
        latent_pi, aux = self.backbone.forward_outputs(features, self.backbone.segment_state(state["pi"]),
                                                       episode_starts)
        latent_vf = latent_pi
        if self.critic_backbone is not None:
            latent_vf, aux_vf = self.critic_backbone.forward_outputs(
                features, self.critic_backbone.segment_state(state["vf"]), episode_starts)
            aux = {**aux, **{f"vf/{k}": v for k, v in aux_vf.items()}}
        with torch.autocast(latent_pi.device.type, enabled=False):  # heads in float32 under a learner's autocast
            latent_pi = self.mlp_extractor.forward_actor(latent_pi.float().reshape(T * N, -1))
            latent_vf = self.mlp_extractor.forward_critic(latent_vf.float().reshape(T * N, -1))
            return (self.value_net(latent_vf).flatten(), self._get_action_dist_from_latent(latent_pi),
                    {name: value.float() for name, value in aux.items()})

    # -- SB3 inference API -----------------------------------------------------------------
    def predict(self, observation: np.ndarray | dict[str, np.ndarray],  # type: ignore[override]
                state: dict[str, dict[str, np.ndarray]] | None = None, episode_start: np.ndarray | None = None,
                deterministic: bool = False) -> tuple[np.ndarray, dict[str, dict[str, np.ndarray]]]:
        """Actions for ``observation`` and the next memory state, as in sb3-contrib.

        ``state=None`` starts new episodes; ``episode_start[i]`` clears env ``i``'s memory first.
        """
        self.set_training_mode(False)
        obs, vectorized = self.obs_to_tensor(observation)
        n_envs = len(next(iter(obs.values()))) if isinstance(obs, dict) else len(obs)
        with torch.inference_mode():
            torch_state = (self.initial_state(n_envs) if state is None else
                           {name: {k: torch.as_tensor(v, device=self.device) for k, v in s.items()}
                            for name, s in state.items()})
            starts = torch.zeros(n_envs, dtype=torch.bool, device=self.device) if episode_start is None else \
                torch.as_tensor(np.asarray(episode_start), device=self.device).bool().reshape(n_envs)
            distribution, new_state = self.get_distribution(obs, torch_state, starts)
            actions = distribution.get_actions(deterministic=deterministic).cpu().numpy()
        actions = actions.reshape((-1, *self.action_space.shape))
        if isinstance(self.action_space, spaces.Box):
            actions = np.clip(actions, self.action_space.low, self.action_space.high)
        if not vectorized:
            actions = actions.squeeze(axis=0)
        return actions, {name: {k: v.cpu().numpy() for k, v in s.items()} for name, s in new_state.items()}
