"""V-MPO (Song et al. 2020) for policies with a Transformer or RNN memory, discrete or Gaussian."""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, ClassVar

import torch
from stable_baselines3.common.distributions import DiagGaussianDistribution, Distribution
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv
from stable_baselines3.common.utils import explained_variance
from torch import Tensor, nn

from agents.on_policy import (
    AdvantageScaleDecay,
    AuxCoefs,
    LearningRate,
    MemoryOnPolicyAlgorithm,
    MinibatchOrder,
    NonFiniteError,
    Precision,
    UniformKLCoef,
)
from agents.vmpo_losses import (
    gaussian_kl_covariance,
    gaussian_kl_mean,
    policy_loss,
    temperature_loss,
    top_half,
    trust_region_loss,
)
from envs.rules import (
    Count,
    NonNegative,
    OptionalMapping,
    Positive,
    Probability,
    Range,
    StepSize,
    Switch,
    Verbosity,
)
from policies.options import checked
from policies.policy import MemoryActorCriticPolicy, PolicyStep
from policies.popart import PopArtBeta, PopArtValueHead

DUAL_MIN = 1e-8
AlphaInit = Annotated[float | None, Range(0.0, low_open=True, optional=True)]
"""the initial trust-region multiplier ``α₀``; ``None``: 5 for discrete actions, 1 (``α_μ``, ``α_Σ``) for Gaussian"""


class Duals(nn.Module):
    """The Lagrange multipliers: temperature `η` and trust-region `α` (`α_μ`, `α_Σ` for
    Gaussian policies), kept raw and projected to `≥ 1e-8` after every step (as in the paper)."""

    def __init__(self, eta: float, alphas: dict[str, float]) -> None:
        super().__init__()
        self.eta = nn.Parameter(torch.tensor(float(eta)))
        self.alphas = nn.ParameterDict({name: nn.Parameter(torch.tensor(float(v))) for name, v in alphas.items()})

    @torch.no_grad()
    def project(self) -> None:
        for parameter in self.parameters():
            parameter.clamp_(min=DUAL_MIN)


class VMPO(MemoryOnPolicyAlgorithm):
    """V-MPO: ``L = L_π + L_η + L_α + c_v L_V + Σ c_k aux_k`` (:mod:`agents.vmpo_losses`).

    - Value targets: n-step returns bootstrapped from the online value function at the rollout
      end, terminations cutting the bootstrap (GAE with λ = 1), optionally PopArt-normalised.
    - Policy: weighted maximum likelihood on the top half of each minibatch's advantages.
    - Trust region: ``KL(π_old ‖ π_θ)`` over the whole minibatch, ``π_old`` being the distribution
      recorded when acting (all its parameters are stored, not just log-probabilities). Gaussian
      policies get decoupled mean and covariance KLs with multipliers ``α_μ``, ``α_Σ``.
    - ``η`` and ``α`` are learned by their own Adam (``dual_learning_rate``) and kept ``≥ 1e-8``.

    Defaults follow the paper (Song et al. 2020): η₀ = 1; α₀ = 5 (discrete) or α_μ₀ = α_Σ₀ = 1
    (Gaussian); ε_η = 0.01 (state inputs); ε_α = 0.01; ε_αμ = 0.0075, ε_αΣ = 1e-5. The paper uses
    no entropy bonus and no importance weighting; Adam at 1e-4 for millions of steps. For the
    small budgets here a seed study on T-Maze (docs/notes/tuned-defaults.md) chose a policy learning
    rate of 1e-3, rollouts of 32 steps, minibatches of 128 and the ``KL(U ‖ π)`` barrier
    (``uniform_kl_coef`` 0.01 on finite action spaces); the duals' rate is 1e-2.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {"MemoryPolicy": MemoryActorCriticPolicy}
    learner_policy_options = ("popart", "popart_beta")

    @checked()
    def __init__(self, policy: str | type[MemoryActorCriticPolicy], env: GymEnv | str,
                 learning_rate: LearningRate = 1e-3, n_steps: Count = 32, batch_size: Count = 128,
                 n_epochs: Count = 4, gamma: Probability = 0.99, vf_coef: NonNegative = 0.5,
                 max_grad_norm: Positive = 0.5, epsilon_eta: Positive = 0.01, epsilon_alpha: Positive = 0.01,
                 epsilon_alpha_mu: Positive = 0.0075, epsilon_alpha_sigma: Positive = 1e-5, eta_init: Positive = 1.0,
                 alpha_init: AlphaInit = None, dual_learning_rate: StepSize = 1e-2,
                 normalize_advantage: Switch = True, advantage_scale_decay: AdvantageScaleDecay = 0.999,
                 uniform_kl_coef: UniformKLCoef = None, popart: Switch = False,
                 popart_beta: PopArtBeta = 1e-3, segment_length: Count = 16,
                 minibatch_order: MinibatchOrder = "shuffled", precision: Precision = "fp32",
                 aux_coefs: AuxCoefs = None, stats_window_size: Count = 100,
                 tensorboard_log: str | None = None, policy_kwargs: OptionalMapping = None,
                 verbose: Verbosity = 0,
                 seed: int | None = None, device: torch.device | str = "auto", _init_setup_model: bool = True) -> None:
        self.n_epochs = n_epochs
        self.epsilon_eta, self.epsilon_alpha = epsilon_eta, epsilon_alpha
        self.epsilon_alpha_mu, self.epsilon_alpha_sigma = epsilon_alpha_mu, epsilon_alpha_sigma
        self.eta_init, self.alpha_init = eta_init, alpha_init
        self.dual_learning_rate = dual_learning_rate
        self.popart, self.popart_beta = popart, popart_beta
        super().__init__(policy, env, learning_rate=learning_rate, n_steps=n_steps, batch_size=batch_size,
                         segment_length=segment_length, minibatch_order=minibatch_order, precision=precision,
                         aux_coefs=aux_coefs,
                         normalize_advantage=normalize_advantage, advantage_scale_decay=advantage_scale_decay,
                         uniform_kl_coef=uniform_kl_coef,
                         gamma=gamma, gae_lambda=1.0,
                         ent_coef=0.0, vf_coef=vf_coef, max_grad_norm=max_grad_norm,
                         stats_window_size=stats_window_size, tensorboard_log=tensorboard_log,
                         policy_kwargs=policy_kwargs, verbose=verbose, seed=seed, device=device,
                         _init_setup_model=_init_setup_model)

    def _setup_model(self) -> None:
        own = {name: getattr(self, name) for name in self.learner_policy_options}
        self.policy_kwargs = {**self.policy_kwargs, **own}
        super()._setup_model()
        self.gaussian = isinstance(self.policy.action_dist, DiagGaussianDistribution)
        if self.gaussian:
            alpha = 1.0 if self.alpha_init is None else self.alpha_init
            alphas = {"mu": alpha, "sigma": alpha}
        else:
            alphas = {"kl": 5.0 if self.alpha_init is None else self.alpha_init}
        self.duals = Duals(self.eta_init, alphas).to(self.device)
        self.dual_optimizer = torch.optim.Adam(self.duals.parameters(), lr=self.dual_learning_rate)

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts, tensors = super()._get_torch_save_params()
        return [*state_dicts, "duals", "dual_optimizer"], tensors

    def _act(self, step: PolicyStep) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        """The policy's own sample, storing π_old: every parameter of the acting distribution."""
        return step.actions, step.log_prob, {"old_distribution": self.policy.distribution_params(step.distribution)}

    def _trust_region(self, old: Distribution, new: Distribution,
                      logs: defaultdict[str, list[Tensor | float]]) -> Tensor:
        """`L_α` (or `L_αμ + L_αΣ`) with KL(π_old ‖ π_θ) averaged over the minibatch."""
        if not self.gaussian:
            if isinstance(old.distribution, list):  # multi-discrete: one categorical per component
                kl = torch.stack([torch.distributions.kl_divergence(o, n)
                                  for o, n in zip(old.distribution, new.distribution, strict=True)], dim=-1)
            else:
                kl = torch.distributions.kl_divergence(old.distribution, new.distribution)
            if kl.dim() > 1:  # independent components (multi-discrete, Bernoulli)
                kl = kl.sum(dim=-1)
            logs["kl"].append(kl.mean().detach())
            return trust_region_loss(kl, self.duals.alphas["kl"], self.epsilon_alpha)
        mean_old, std_old = old.distribution.mean, old.distribution.stddev
        kl_mu = gaussian_kl_mean(mean_old, std_old, new.distribution.mean)
        kl_sigma = gaussian_kl_covariance(std_old, new.distribution.stddev)
        logs["kl_mu"].append(kl_mu.mean().detach())
        logs["kl_sigma"].append(kl_sigma.mean().detach())
        return (trust_region_loss(kl_mu, self.duals.alphas["mu"], self.epsilon_alpha_mu)
                + trust_region_loss(kl_sigma, self.duals.alphas["sigma"], self.epsilon_alpha_sigma))

    def train(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        logs: defaultdict[str, list[Tensor | float]] = defaultdict(list)
        value_head = self.policy.value_net
        for _ in range(self.n_epochs):
            for batch in self.rollout_buffer.segments(self.batch_size, self.segment_length, self.minibatch_order):
                if isinstance(value_head, PopArtValueHead):
                    value_head.update(batch.returns)
                values, distribution, log_prob, advantages, aux_loss = self._recompute(batch, logs)[1:]
                old = self.policy.distribution_from_params(batch.extras["old_distribution"])
                top = top_half(advantages)
                eta = self.duals.eta
                pi = policy_loss(log_prob[top], advantages[top], eta)
                eta_loss = temperature_loss(advantages[top], eta, self.epsilon_eta)
                alpha_loss = self._trust_region(old, distribution, logs)
                errors = values - batch.returns
                if isinstance(value_head, PopArtValueHead):  # the loss of the normalised head
                    errors = errors / value_head.scale
                value_loss = 0.5 * errors.square().mean()
                loss = pi.loss + eta_loss + alpha_loss + self.vf_coef * value_loss + aux_loss
                self.dual_optimizer.zero_grad()
                logs["grad_norm"].append(self._optimize(loss, {"policy_loss": pi.loss, "temperature_loss": eta_loss,
                                                               "trust_region_loss": alpha_loss,
                                                               "value_loss": value_loss, "aux_loss": aux_loss}))
                self.dual_optimizer.step()
                self.duals.project()
                if not torch.isfinite(torch.cat([p.detach().flatten() for p in self.duals.parameters()])).all():
                    raise NonFiniteError(f"non-finite Lagrange multipliers at update {self._n_updates}, timestep "
                                         f"{self.num_timesteps}: "
                                         f"{ {n: p.item() for n, p in self.duals.named_parameters()} }")
                logs["policy_loss"].append(pi.loss.detach())
                logs["temperature_loss"].append(eta_loss.detach())
                logs["value_loss"].append(value_loss.detach())
                logs["psi_effective_sample_size"].append(pi.effective_sample_size.detach())
                logs["top_half_threshold"].append(advantages[top].min().detach())
                logs["loss"].append(loss.detach())
            self._n_updates += 1
        self._record_logs(logs)
        self.logger.record("train/eta", self.duals.eta.item())
        for name, alpha in self.duals.alphas.items():
            self.logger.record(f"train/alpha_{name}" if self.gaussian else "train/alpha", alpha.item())
        values, returns = (torch.as_tensor(x).cpu().numpy().flatten()
                           for x in (self.rollout_buffer.values, self.rollout_buffer.returns))
        self.logger.record("train/explained_variance", explained_variance(values, returns))
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
