"""The exploration floor: the behaviour mixture ``μ = (1 − ε)·π + ε/|A|``, its log-probabilities,
the ratio PPO takes against it, and the trap it exists for: an action whose probability has
collapsed is never sampled again by PPO, so the policy cannot recover it; with the floor it can."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.distributions import make_proba_distribution
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

from agents import VMPO, MemoryPPO
from agents.exploration import behaviour_sample, check_action_space, uniform_kl
from agents.on_policy import DEFAULT_UNIFORM_KL
from envs import make_vec_env
from experiments.evaluation import evaluate

UP = 1  # envs.tmaze: 0 right, 1 up, 2 left, 3 down


def distribution(space: spaces.Space, params: torch.Tensor):
    dist = make_proba_distribution(space)
    return dist.proba_distribution(action_logits=params)


@pytest.mark.parametrize("space,n_params", [
    (spaces.Discrete(4), 4),
    (spaces.MultiDiscrete([3, 2]), 5),
    (spaces.MultiBinary(3), 3),
])
def test_behaviour_samples_follow_the_mixture_and_report_its_log_probability(space, n_params):
    torch.manual_seed(0)
    epsilon, batch = 0.3, 20_000
    logits = torch.tensor([[4.0, -3.0, 0.5, 1.0, -2.0][:n_params]]).repeat(batch, 1)
    dist = distribution(space, logits)
    actions, log_mu = behaviour_sample(dist, epsilon)
    assert actions.shape == (batch, *space.shape)
    # log μ(a) by hand, per dimension: (1 − ε)·π_d(a_d) + ε/n_d
    if isinstance(space, spaces.Discrete):
        parts, columns = [torch.softmax(logits, -1)], [actions]
    elif isinstance(space, spaces.MultiDiscrete):
        parts = [torch.softmax(logits[:, :3], -1), torch.softmax(logits[:, 3:], -1)]
        columns = list(actions.unbind(-1))
    else:
        p = torch.sigmoid(logits)
        parts = [torch.stack([1 - p[:, i], p[:, i]], -1) for i in range(3)]
        columns = list(actions.unbind(-1))
    mixtures = [(1 - epsilon) * probs + epsilon / probs.shape[-1] for probs in parts]
    expected = sum(m.gather(-1, a.long().view(-1, 1)).squeeze(-1).log() for m, a in zip(mixtures, columns,
                                                                                         strict=True))
    torch.testing.assert_close(log_mu, expected)
    for mixture, column in zip(mixtures, columns, strict=True):  # frequencies match μ (4 σ)
        frequency = torch.bincount(column.long(), minlength=mixture.shape[-1]).float() / batch
        sigma = (mixture[0] * (1 - mixture[0]) / batch).sqrt()
        assert ((frequency - mixture[0]).abs() <= 4 * sigma + 1e-4).all(), (frequency, mixture[0])


def test_a_collapsed_action_keeps_probability_epsilon_over_n():
    logits = torch.tensor([[30.0, -30.0, -30.0, -30.0]])
    _, log_mu = behaviour_sample(distribution(spaces.Discrete(4), logits.repeat(4000, 1)), 0.2)
    assert log_mu.exp().min() >= 0.05 - 1e-6  # the rare actions: ε/|A| = 0.05


def test_continuous_actions_are_refused_with_the_valid_spaces_named():
    with pytest.raises(ValueError, match=r"Discrete, MultiDiscrete, MultiBinary.*got Box"):
        check_action_space(spaces.Box(-1, 1, (2,)), "exploration_floor")
    for algo, option in ((MemoryPPO, "exploration_floor"), (MemoryPPO, "uniform_kl_coef"), (VMPO, "uniform_kl_coef")):
        with pytest.raises(ValueError, match=f"{option} needs a finite action space.*got Box: set {option}=0"):
            algo("MemoryPolicy", sb3_make_vec_env("Pendulum-v1", n_envs=2), **{option: 0.1},
                 policy_kwargs={"backbone": "mlp", "backbone_kwargs": {"hidden_size": 8}})


@pytest.mark.parametrize("space,n_params", [
    (spaces.Discrete(4), 4),
    (spaces.MultiDiscrete([3, 2]), 5),
    (spaces.MultiBinary(3), 3),
])
def test_uniform_kl_is_the_kl_from_the_uniform_policy(space, n_params):
    logits = torch.randn(6, n_params, generator=torch.Generator().manual_seed(0)) * 3
    dist = distribution(space, logits)
    uniform = distribution(space, torch.zeros(6, n_params))
    expected = torch.distributions.kl_divergence(uniform.distribution, dist.distribution) \
        if isinstance(space, spaces.Discrete) else sum(
            torch.distributions.kl_divergence(u, d).reshape(6, -1).sum(-1) for u, d in
            (zip(uniform.distribution, dist.distribution, strict=True) if isinstance(space, spaces.MultiDiscrete)
             else [(uniform.distribution, dist.distribution)]))
    torch.testing.assert_close(uniform_kl(dist), expected)


def test_uniform_kl_pulls_a_collapsed_logit_back_with_constant_force_where_the_entropy_does_not():
    logits = torch.tensor([[0.0, 0.0, 0.0, -20.0]], requires_grad=True)
    dist = distribution(spaces.Discrete(4), logits)
    (barrier_grad,) = torch.autograd.grad(uniform_kl(dist).sum(), logits, retain_graph=True)
    (entropy_grad,) = torch.autograd.grad(-dist.entropy().sum(), logits)
    assert barrier_grad[0, 3] == pytest.approx(-0.25, abs=1e-6)  # π(a) − 1/|A|: minimising raises the logit
    assert abs(entropy_grad[0, 3]) < 1e-6


class _NoCallback:
    def on_rollout_start(self) -> None: ...
    def on_rollout_end(self) -> None: ...
    def on_step(self) -> bool: return True
    def update_locals(self, _: dict) -> None: ...


def model(exploration_floor, seed: int = 0) -> MemoryPPO:
    """A small LSTM PPO on a T-Maze of length 2."""
    env = make_vec_env("TMaze-v0", n_envs=8, seed=seed, length=2)
    return MemoryPPO("MemoryPolicy", env, n_steps=24, batch_size=48, n_epochs=4, segment_length=3,
                     learning_rate=3e-3, exploration_floor=exploration_floor, seed=seed, tensorboard_log=None,
                     policy_kwargs={"backbone": "lstm", "backbone_kwargs": {"hidden_size": 16}})


def test_the_ratio_is_taken_against_the_behaviour_mixture_and_the_rollout_check_against_pi():
    """Stored ``log μ(a)`` equals the mixture of the recomputed policy; stored ``log π_old(a)``
    equals the recomputed ``log π`` (rollout equals training still holds with the floor)."""
    ppo = model(0.4)
    ppo.learn(ppo.n_steps * ppo.n_envs)  # one rollout and one update
    ppo.collect_rollouts(ppo.env, _NoCallback(), ppo.rollout_buffer, ppo.n_steps)
    batch = next(ppo.rollout_buffer.segments(ppo.n_steps * ppo.n_envs, ppo.segment_length))
    with torch.no_grad():
        _, dist, _ = ppo.policy.evaluate_segments(batch.observations, batch.actions.long().flatten(),
                                                  batch.states, batch.episode_starts)
    actions = batch.actions.long().flatten()
    log_pi = dist.log_prob(actions)
    torch.testing.assert_close(log_pi, batch.old_log_prob, atol=1e-5, rtol=0)
    mixture = 0.6 * dist.distribution.probs + 0.4 / 4
    torch.testing.assert_close(batch.extras["behaviour_log_prob"],
                               mixture.gather(-1, actions.view(-1, 1)).squeeze(-1).log(), atol=1e-5, rtol=0)


def trapped_success(collapse: float, seed: int, **options) -> float:
    """Train from a policy whose "up" logit was lowered by ``collapse`` (π(up) ≈ e^collapse / 3):
    the T-Maze with cue "up" can then only be solved by an action PPO no longer samples."""
    env = make_vec_env("TMaze-v0", n_envs=16, seed=seed, length=2)
    options = {"uniform_kl_coef": 0.0, **options}  # the barrier is on by default: off unless asked for
    ppo = MemoryPPO("MemoryPolicy", env, n_steps=12, batch_size=96, n_epochs=4, segment_length=3,
                    learning_rate=3e-3, seed=seed, tensorboard_log=None, **options,
                    policy_kwargs={"backbone": "framestack", "backbone_kwargs": {"k": 3, "hidden_size": 16}})
    with torch.no_grad():
        ppo.policy.action_net.bias[UP] = collapse
    ppo.learn(12_000)
    result = evaluate(ppo, make_vec_env("TMaze-v0", n_envs=8, seed=seed + 100, length=2), n_episodes=100)
    assert result.success_rate is not None
    return result.success_rate


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])  # seed 1: `make test-slow`
def test_plain_ppo_and_an_entropy_bonus_never_recover_a_collapsed_action(seed):
    """The trap behind the T-Maze failures: success stays at the cue-"down" half (chance 0.5).
    The entropy's pull on a logit is ``−π(a)(log π(a) + H)``: at −6 it sometimes suffices
    (measured: seed 1 of 2 escapes), at −10 it does not (0 of 4 seeds)."""
    assert trapped_success(-6.0, seed) <= 0.6
    assert trapped_success(-10.0, seed, ent_coef=0.03) <= 0.6


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])  # seed 1: `make test-slow`
def test_the_floor_reopens_a_collapsed_action(seed):
    """π(up) ≈ 8e-4: acting with μ samples it, and the ratio against μ lets it grow."""
    assert trapped_success(-6.0, seed, exploration_floor=0.1) >= 0.9


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])  # seed 1: `make test-slow`
def test_the_uniform_kl_reopens_an_action_too_rare_for_the_floor(seed):
    """π(up) ≈ 1.5e-5: the floor's samples carry a gradient ∝ π(up) and stall (measured: 1 of 4
    seeds escapes), the log-barrier pulls the logit back with constant force."""
    assert trapped_success(-10.0, seed, uniform_kl_coef=0.1) >= 0.9


def test_vmpo_takes_the_barrier_too():
    env = make_vec_env("TMaze-v0", n_envs=4, seed=0, length=2)
    vmpo = VMPO("MemoryPolicy", env, n_steps=6, batch_size=24, segment_length=3, uniform_kl_coef=0.5, seed=0,
                policy_kwargs={"backbone": "mlp", "backbone_kwargs": {"hidden_size": 8}})
    vmpo.learn(48)
    assert vmpo.logger.name_to_value["train/uniform_kl"] > 0


def test_the_barrier_is_on_by_default_for_finite_action_spaces_only():
    assert model(0.0).uniform_kl_coef == DEFAULT_UNIFORM_KL > 0
    continuous = MemoryPPO("MemoryPolicy", sb3_make_vec_env("Pendulum-v1", n_envs=2),
                           policy_kwargs={"backbone": "mlp", "backbone_kwargs": {"hidden_size": 8}})
    assert continuous.uniform_kl_coef == 0.0


def test_a_scheduled_floor_is_followed_and_logged():
    ppo = model(lambda progress_remaining: 0.5 * progress_remaining)
    assert ppo.explores
    ppo.learn(2 * ppo.n_steps * ppo.n_envs)
    logged = ppo.logger.name_to_value["train/exploration_floor"]
    assert np.isclose(logged, 0.5 * ppo._current_progress_remaining)
    assert not model(0.0).explores
