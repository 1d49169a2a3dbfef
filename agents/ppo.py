"""MemoryPPO: PPO (Schulman et al. 2017) for policies with a Transformer or RNN memory."""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, ClassVar

import torch
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from stable_baselines3.common.utils import FloatSchedule, LinearSchedule, explained_variance
from torch import Tensor

from agents.exploration import behaviour_sample, check_action_space
from agents.on_policy import (
    AdvantageScaleDecay,
    AuxCoefs,
    LearningRate,
    MemoryOnPolicyAlgorithm,
    MinibatchOrder,
    Precision,
    UniformKLCoef,
)
from envs.rules import Count, NonNegative, OptionalMapping, Positive, Probability, Range, Switch, Verbosity
from policies.options import checked
from policies.policy import MemoryActorCriticPolicy, PolicyStep

LEARNING_RATE = LinearSchedule(1e-3, 0.0, 1.0)
"""the default learning rate: 1e-3 decaying linearly to 0 over the run (``lin_1e-3``; docs/notes/tuned-defaults.md)"""
ClipRange = Annotated[float | Schedule, Range(0.0, low_open=True, schedule=True)]
"""PPO's ``ε`` (Schulman et al. 2017)"""
ClipRangeVF = Annotated[float | Schedule | None, Range(0.0, low_open=True, optional=True, schedule=True)]
"""the clip range of values; ``None``: values are not clipped"""
TargetKL = Annotated[float | None, Range(0.0, low_open=True, optional=True)]
ExplorationFloor = Annotated[float | Schedule, Range(0.0, 1.0, schedule=True)]
"""the mixture weight ``ε`` of the uniform policy (:mod:`agents.exploration`)"""


class MemoryPPO(MemoryOnPolicyAlgorithm):
    """PPO with the clipped surrogate ``L = −E[min(r A, clip(r, 1±ε) A)] + c_v L_V − c_e H + Σ c_k aux_k``.

    The options are those of sb3-contrib's ``RecurrentPPO`` (``n_steps``, ``batch_size``,
    ``n_epochs``, ``gamma``, ``gae_lambda``, ``clip_range`` and ``clip_range_vf`` (schedules
    allowed; a constant ``clip_range_vf`` must be > 0), ``normalize_advantage``, ``ent_coef``, ``vf_coef``,
    ``max_grad_norm``, ``target_kl``), with its defaults except four chosen by a seed study on memory tasks
    (docs/notes/tuned-defaults.md): ``learning_rate`` 1e-3 decaying linearly to 0, ``n_steps`` 64, ``batch_size``
    256 and ``n_epochs`` 4 (RecurrentPPO: constant 3e-4, 128, 128, 10); plus the memory options of
    :class:`MemoryOnPolicyAlgorithm` (``segment_length``, ``aux_coefs``, ``advantage_scale_decay``: advantages are
    standardised per minibatch but never divided by less than the scale the run has sustained, so that a solved
    policy is not moved by its value function's residue, :mod:`agents.advantages`). The backbone is chosen in
    ``policy_kwargs``:
    ``MemoryPPO("MemoryPolicy", env, policy_kwargs={"backbone": "gtrxl",
    "backbone_kwargs": {"memory_length": 64}})``.

    ``train/rollout_logp_gap`` logs ``max |log π_recomputed − log π_rollout|`` on the first
    minibatch of each update, before any gradient step: it is ~1e-7 when memory is rebuilt
    exactly as in the rollout (docs/design.md, "rollout equals training") and large when it is not.

    ``exploration_floor`` ``ε`` (a number or a schedule; 0 = off) acts with the mixture
    ``μ = (1 − ε)·π + ε/|A|`` and takes the ratio against it, ``r = π_θ(a)/μ(a)``, so an action
    whose probability collapsed early is still sampled and may regain ``(1 + clip)·ε/|A|`` per
    update (:mod:`agents.exploration`); finite action spaces only. ``uniform_kl_coef`` is the
    log-barrier of :class:`MemoryOnPolicyAlgorithm`.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {"MemoryPolicy": MemoryActorCriticPolicy}

    @checked()
    def __init__(self, policy: str | type[MemoryActorCriticPolicy], env: GymEnv | str,
                 learning_rate: LearningRate = LEARNING_RATE, n_steps: Count = 64, batch_size: Count = 256,
                 n_epochs: Count = 4, gamma: Probability = 0.99, gae_lambda: Probability = 0.95,
                 clip_range: ClipRange = 0.2, clip_range_vf: ClipRangeVF = None,
                 normalize_advantage: Switch = True, advantage_scale_decay: AdvantageScaleDecay = 0.999,
                 ent_coef: NonNegative = 0.0, vf_coef: NonNegative = 0.5,
                 max_grad_norm: Positive = 0.5, target_kl: TargetKL = None,
                 exploration_floor: ExplorationFloor = 0.0, uniform_kl_coef: UniformKLCoef = None,
                 segment_length: Count = 16, minibatch_order: MinibatchOrder = "shuffled",
                 precision: Precision = "fp32", aux_coefs: AuxCoefs = None, stats_window_size: Count = 100,
                 tensorboard_log: str | None = None, policy_kwargs: OptionalMapping = None,
                 verbose: Verbosity = 0, seed: int | None = None, device: torch.device | str = "auto",
                 _init_setup_model: bool = True) -> None:
        self.n_epochs = n_epochs
        self.clip_range = clip_range
        self.clip_range_vf = clip_range_vf
        self.target_kl = target_kl
        self.exploration_floor = exploration_floor
        super().__init__(policy, env, learning_rate=learning_rate, n_steps=n_steps, batch_size=batch_size,
                         segment_length=segment_length, minibatch_order=minibatch_order, precision=precision,
                         aux_coefs=aux_coefs,
                         normalize_advantage=normalize_advantage, advantage_scale_decay=advantage_scale_decay,
                         uniform_kl_coef=uniform_kl_coef,
                         gamma=gamma, gae_lambda=gae_lambda,
                         ent_coef=ent_coef, vf_coef=vf_coef, max_grad_norm=max_grad_norm,
                         stats_window_size=stats_window_size, tensorboard_log=tensorboard_log,
                         policy_kwargs=policy_kwargs, verbose=verbose, seed=seed, device=device,
                         _init_setup_model=_init_setup_model)

    def _setup_model(self) -> None:
        super()._setup_model()
        self.clip_range = FloatSchedule(self.clip_range)
        if self.clip_range_vf is not None:
            self.clip_range_vf = FloatSchedule(self.clip_range_vf)
        self.explores = not (isinstance(self.exploration_floor, int | float) and self.exploration_floor == 0)
        if self.explores:
            check_action_space(self.action_space, "exploration_floor")
            self.exploration_floor = FloatSchedule(self.exploration_floor)

    def _act(self, step: PolicyStep) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """With a floor, act with `μ` and store `log μ(a)` beside `log π_old(a)`."""
        if not self.explores:
            return super()._act(step)
        epsilon = self.exploration_floor(self._current_progress_remaining)
        actions, log_mu = behaviour_sample(step.distribution, epsilon)
        return actions, step.distribution.log_prob(actions), {"behaviour_log_prob": log_mu}

    def train(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range(self._current_progress_remaining)
        clip_range_vf = None if self.clip_range_vf is None else self.clip_range_vf(self._current_progress_remaining)
        logs: defaultdict[str, list[Tensor | float]] = defaultdict(list)
        continue_training = True
        for epoch in range(self.n_epochs):
            for batch in self.rollout_buffer.segments(self.batch_size, self.segment_length, self.minibatch_order):
                values, distribution, log_prob, advantages, aux_loss = self._recompute(batch, logs)[1:]
                behaviour = batch.extras["behaviour_log_prob"] if self.explores else batch.old_log_prob
                ratio = torch.exp(log_prob - behaviour)
                policy_loss = -torch.min(advantages * ratio,
                                         advantages * torch.clamp(ratio, 1 - clip_range, 1 + clip_range)).mean()
                values_pred = values if clip_range_vf is None else batch.old_values + torch.clamp(
                    values - batch.old_values, -clip_range_vf, clip_range_vf)
                value_loss = (batch.returns - values_pred).square().mean()
                entropy = distribution.entropy()
                entropy_loss = -(entropy.mean() if entropy is not None else -log_prob.mean())
                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss + aux_loss
                with torch.no_grad():
                    log_ratio = log_prob - batch.old_log_prob
                    approx_kl = ((torch.exp(log_ratio) - 1) - log_ratio).mean()
                    logs["policy_gradient_loss"].append(policy_loss.detach())
                    logs["value_loss"].append(value_loss.detach())
                    logs["entropy_loss"].append(entropy_loss.detach())
                    logs["clip_fraction"].append(((ratio - 1).abs() > clip_range).float().mean())
                    logs["approx_kl"].append(approx_kl)
                if self.target_kl is not None and approx_kl.item() > 1.5 * self.target_kl:  # read only with a target
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at epoch {epoch} due to reaching max kl: {approx_kl.item():.4f}")
                    break
                logs["grad_norm"].append(self._optimize(loss, {"policy_loss": policy_loss, "value_loss": value_loss,
                                                               "entropy_loss": entropy_loss, "aux_loss": aux_loss}))
                logs["loss"].append(loss.detach())
            self._n_updates += 1
            if not continue_training:
                break
        self._record_logs(logs)
        buffer = self.rollout_buffer
        values, returns = (torch.as_tensor(x).cpu().numpy().flatten() for x in (buffer.values, buffer.returns))
        self.logger.record("train/explained_variance", explained_variance(values, returns))
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        if self.explores:
            self.logger.record("train/exploration_floor", self.exploration_floor(self._current_progress_remaining))
        if clip_range_vf is not None:
            self.logger.record("train/clip_range_vf", clip_range_vf)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", torch.exp(self.policy.log_std).mean().item())

