"""Stable-Baselines3 parity of the Python API: every observation and action space SB3 takes, its features
extractor choices and options, save and load, predict, callbacks, VecEnv wrappers, continued learning, same seed
same updates, gradients after acting, and SB3's own option checks and messages."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, CheckpointCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.envs import (
    FakeImageEnv,
    IdentityEnv,
    IdentityEnvBox,
    IdentityEnvMultiBinary,
    IdentityEnvMultiDiscrete,
    SimpleMultiObsEnv,
)
from stable_baselines3.common.torch_layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    FlattenExtractor,
    NatureCNN,
)
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize, VecTransposeImage, unwrap_vec_wrapper

from agents import VMPO, MemoryPPO
from policies import BACKBONES
from policies.policy import MemoryActorCriticPolicy
from tests.conftest import LogpGaps, small_options

SIZES = {"d_model": 8, "n_heads": 2, "memory_length": 4, "max_steps": 2, "hidden_size": 8, "k": 2}
"""tiny widths every backbone takes the options of"""
TINY = {"n_steps": 8, "batch_size": 16, "segment_length": 4, "n_epochs": 1, "seed": 0}


def tiny(env: Any, backbone: str = "gtrxl", algo: type = MemoryPPO, policy: dict[str, Any] | None = None,
         **kwargs: Any) -> Any:
    """A learner with a tiny ``backbone`` (plus ``policy`` options) and 8-step rollouts on ``env``."""
    policy_kwargs = {"backbone": backbone, "backbone_kwargs": small_options(backbone, **SIZES), **(policy or {})}
    return algo("MemoryPolicy", env, policy_kwargs=policy_kwargs, **{**TINY, **kwargs})


def image_env(n_envs: int = 2, **kwargs: Any) -> Any:
    """36×36 grey images, the smallest NatureCNN takes, with Discrete actions."""
    return make_vec_env(FakeImageEnv, n_envs=n_envs, seed=0,
                        env_kwargs={"screen_height": 36, "screen_width": 36, "n_channels": 1, "discrete": True,
                                    **kwargs})


def normalized_image_env() -> Any:
    """A channel-first image that ``VecNormalize`` turns to float32 without bounds: an image for SB3 only when
    ``normalize_images=False`` says it is normalised already."""
    return VecNormalize(image_env(channel_first=True))


ENVS = {
    "discrete-obs": lambda: make_vec_env(IdentityEnv, n_envs=2, seed=0, env_kwargs={"dim": 3}),
    "multidiscrete": lambda: make_vec_env(IdentityEnvMultiDiscrete, n_envs=2, seed=0, env_kwargs={"dim": 3}),
    "multibinary": lambda: make_vec_env(IdentityEnvMultiBinary, n_envs=2, seed=0, env_kwargs={"dim": 3}),
    "box": lambda: make_vec_env(IdentityEnvBox, n_envs=2, seed=0),
    "image": image_env,
    "dict": lambda: make_vec_env(SimpleMultiObsEnv, n_envs=2, seed=0),
}
"""an env for each observation space (Discrete, MultiDiscrete, MultiBinary, Box vector, Box image, Dict), whose
actions together cover Discrete, MultiDiscrete, MultiBinary and Box"""


def policy_for(observation_space: spaces.Space, **kwargs: Any) -> MemoryActorCriticPolicy:
    return MemoryActorCriticPolicy(observation_space, spaces.Discrete(2), lambda _: 1e-3, backbone="mlp",
                                   backbone_kwargs={"hidden_size": 8, "n_layers": 1}, **kwargs)


IMAGE = spaces.Box(0, 255, (1, 36, 36), np.uint8)
FLOAT_IMAGE = spaces.Box(-np.inf, np.inf, (1, 36, 36), np.float32)


@pytest.mark.parametrize("observation_space,kwargs,extractor", [
    (spaces.Box(-1, 1, (3,)), {}, FlattenExtractor),
    (IMAGE, {}, NatureCNN),
    (FLOAT_IMAGE, {"normalize_images": False}, NatureCNN),
    (FLOAT_IMAGE, {}, FlattenExtractor),
    (spaces.Dict({"image": IMAGE, "vector": spaces.Box(-1, 1, (2,))}), {}, CombinedExtractor),
    (spaces.Discrete(4), {}, FlattenExtractor),
    (spaces.MultiDiscrete([2, 3]), {}, FlattenExtractor),
    (spaces.MultiBinary(3), {}, FlattenExtractor),
], ids=["box", "image", "normalized-image", "float-image-normalized-again", "dict", "discrete", "multidiscrete",
        "multibinary"])
def test_the_features_extractor_is_sb3s_choice(observation_space, kwargs, extractor):
    """SB3's choice: ``is_image_space(space, normalized_image=not normalize_images)`` decides NatureCNN."""
    assert type(policy_for(observation_space, **kwargs).features_extractor) is extractor


@pytest.mark.parametrize("algo", [MemoryPPO, VMPO])
@pytest.mark.parametrize("name", list(ENVS))
def test_every_observation_and_action_space_trains_and_predicts(name, algo):
    """Two updates with rollout equals training; ``predict`` on one observation and on a batch gives actions of
    the action space's shape, and carries the state of as many envs."""
    env = ENVS[name]()
    model = tiny(env, "lstm", algo=algo)
    gaps = LogpGaps()
    model.learn(3 * 8 * 2, callback=gaps)
    assert gaps.gaps and max(gaps.gaps) < 1e-5
    obs = env.reset()
    batch, state = model.predict(obs, deterministic=True)
    assert batch.shape == (2, *env.action_space.shape) and state["pi"]["memory"].shape[0] == 2
    assert all(env.action_space.contains(action) for action in batch)
    single = obs[0] if not isinstance(obs, dict) else {key: value[0] for key, value in obs.items()}
    action, state = model.predict(single, deterministic=True)
    assert np.shape(action) == env.action_space.shape and state["pi"]["memory"].shape[0] == 1
    np.testing.assert_allclose(action, batch[0], rtol=1e-5, atol=1e-6)


def test_features_extractor_kwargs_reach_the_cnn_of_a_normalized_image():
    """``features_extractor_kwargs={"features_dim": ...}`` configures NatureCNN, also for a VecNormalize'd float
    image with ``normalize_images=False`` (which SB3 sends to the CNN, not to a FlattenExtractor)."""
    model = tiny(normalized_image_env(), "lstm",
                 policy={"normalize_images": False, "features_extractor_kwargs": {"features_dim": 8}})
    assert type(model.policy.features_extractor) is NatureCNN and model.policy.features_dim == 8
    model.learn(16)


class Halves(BaseFeaturesExtractor):
    """A custom features extractor with an option: the first ``width`` inputs, halved."""

    def __init__(self, observation_space: spaces.Box, width: int) -> None:
        super().__init__(observation_space, features_dim=width)
        self.width = width

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return observations[:, :self.width] / 2


def test_a_custom_features_extractor_class_takes_its_kwargs():
    model = tiny(ENVS["box"](), policy={"features_extractor_class": Halves, "features_extractor_kwargs": {"width": 1}})
    assert isinstance(model.policy.features_extractor, Halves) and model.policy.features_dim == 1
    model.learn(16)


def test_separate_features_extractors_give_the_critic_its_own_backbone():
    """``share_features_extractor=False``: the critic's features extractor feeds a critic backbone; the actor's
    loss never reaches the critic's modules nor the critic's loss the actor's; a shared backbone is refused."""
    model = tiny(image_env(), "gtrxl", policy={"share_features_extractor": False,
                                               "features_extractor_kwargs": {"features_dim": 8}})
    policy = model.policy
    assert policy.pi_features_extractor is not policy.vf_features_extractor
    assert policy.critic_backbone is not None and not policy.share_backbone
    gaps = LogpGaps()
    model.learn(3 * 8 * 2, callback=gaps)
    assert max(gaps.gaps) < 1e-5
    obs = torch.as_tensor(model.env.reset())
    policy.optimizer.zero_grad()
    value = policy.predict_values(obs, policy.initial_state(2), torch.ones(2, dtype=torch.bool)).sum()
    value.backward()
    assert all(p.grad is None for p in [*policy.pi_features_extractor.parameters(), *policy.backbone.parameters()])
    assert any(p.grad is not None for p in policy.vf_features_extractor.parameters())
    with pytest.raises(ValueError, match="share_backbone=True with share_features_extractor=False"):
        tiny(image_env(), policy={"share_features_extractor": False, "share_backbone": True})


def test_save_load_round_trips(tmp_path):
    """With and without an env, with ``custom_objects``, with ``policy_kwargs`` as given for training (refused
    when they differ), and ``get_parameters`` / ``set_parameters``."""
    env = ENVS["box"]()
    policy_kwargs = {"backbone": "gtrxl", "backbone_kwargs": {"d_model": 8, "n_heads": 2, "memory_length": 4},
                     "net_arch": [8]}
    model = MemoryPPO("MemoryPolicy", env, policy_kwargs=deepcopy(policy_kwargs), **TINY).learn(16)
    model.save(tmp_path / "model")
    obs = env.reset()
    actions, _ = model.predict(obs, deterministic=True)
    for kwargs in ({}, {"env": env}, {"env": env, "policy_kwargs": deepcopy(policy_kwargs)},
                   {"custom_objects": {"learning_rate": 5e-4}}):
        loaded = MemoryPPO.load(tmp_path / "model", **kwargs)
        np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], actions)
    assert loaded.learning_rate == 5e-4
    with pytest.raises(ValueError, match="do not equal the stored policy kwargs"):
        MemoryPPO.load(tmp_path / "model", env=env, policy_kwargs={**policy_kwargs, "net_arch": [16]})
    loaded = MemoryPPO.load(tmp_path / "model", env=env).learn(16)
    parameters = model.get_parameters()
    loaded.set_parameters(parameters)
    for name, tensor in loaded.get_parameters()["policy"].items():
        torch.testing.assert_close(tensor, parameters["policy"][name], msg=name)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], actions)


def test_vmpo_loads_with_the_policy_kwargs_it_was_trained_with(tmp_path):
    """V-MPO sets the PopArt options of the policy from its own: they are not the user's to repeat."""
    policy_kwargs = {"backbone": "gru", "backbone_kwargs": {"hidden_size": 8}}
    VMPO("MemoryPolicy", ENVS["box"](), popart=True, policy_kwargs=deepcopy(policy_kwargs), **TINY).save(
        tmp_path / "vmpo")
    assert VMPO.load(tmp_path / "vmpo", policy_kwargs=policy_kwargs).policy.popart


def test_callbacks_see_every_step_and_can_stop_training(tmp_path):
    class Counts(BaseCallback):
        def __init__(self, stop_at: int | None = None) -> None:
            super().__init__()
            self.stop_at, self.rollouts, self.ends = stop_at, 0, 0

        def _on_rollout_start(self) -> None:
            self.rollouts += 1

        def _on_training_end(self) -> None:
            self.ends += 1

        def _on_step(self) -> bool:
            return self.stop_at is None or self.n_calls < self.stop_at

    counts = Counts()
    model = tiny(ENVS["box"]())
    model.learn(32, callback=CallbackList([counts, CheckpointCallback(8, str(tmp_path), name_prefix="m")]))
    assert (counts.n_calls, counts.rollouts, counts.ends) == (16, 2, 1)
    assert sorted(p.name for p in tmp_path.glob("m_*.zip")) == ["m_16_steps.zip", "m_32_steps.zip"]
    stopper = Counts(stop_at=3)
    model.learn(32, callback=stopper)
    assert stopper.n_calls == 3 and model.num_timesteps == 3 * 2


def test_vec_normalize_vec_frame_stack_and_vec_transpose_image(tmp_path):
    """VecNormalize statistics survive a save and load; VecFrameStack stacks observations for the policy; a
    channel-last image env is wrapped in VecTransposeImage, and ``predict`` takes its untransposed images."""
    env = VecNormalize(ENVS["box"]())
    model = tiny(env).learn(16)
    env.save(str(tmp_path / "stats.pkl"))
    restored = VecNormalize.load(str(tmp_path / "stats.pkl"), ENVS["box"]())
    np.testing.assert_allclose(restored.obs_rms.mean, env.obs_rms.mean)
    model.save(tmp_path / "model")
    MemoryPPO.load(tmp_path / "model", env=restored).learn(16)

    stacked = VecFrameStack(ENVS["box"](), n_stack=3)
    model = tiny(stacked).learn(16)
    assert model.observation_space.shape == (3,)

    model = tiny(image_env(), "lstm", policy={"features_extractor_kwargs": {"features_dim": 8}}).learn(16)
    assert unwrap_vec_wrapper(model.get_env(), VecTransposeImage) is not None
    raw = image_env().reset()
    assert raw.shape[-1] == 1 and model.predict(raw)[0].shape == (2,)


def test_learning_continues_with_reset_num_timesteps_false():
    model = tiny(ENVS["box"]()).learn(16)
    state = model._last_state
    model.learn(16, reset_num_timesteps=False)
    assert model.num_timesteps == 32 and model._last_state is not state
    model.learn(16)
    assert model.num_timesteps == 16


@pytest.mark.parametrize("algo", [MemoryPPO, VMPO])
def test_same_seed_same_first_updates(algo):
    def trained(seed: int) -> list[torch.Tensor]:
        model = tiny(ENVS["multidiscrete"](), "lstm", algo=algo, seed=seed,
                     policy={"share_features_extractor": False})
        model.learn(32)
        return [p.detach().clone() for p in model.policy.parameters()]

    first, again, other = trained(0), trained(0), trained(1)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize("backbone", list(BACKBONES))
def test_gradients_flow_after_predict_and_after_a_rollout(backbone):
    """``get_distribution`` and ``predict_values`` with gradients, after ``predict`` and after rollouts (both run
    under ``torch.inference_mode`` and fill the backbone's step caches)."""
    env = ENVS["box"]()
    model = tiny(env, backbone)
    policy, obs = model.policy, torch.as_tensor(env.reset())
    starts = torch.ones(2, dtype=torch.bool)
    for act in (lambda: model.predict(obs.numpy()), lambda: model.learn(16)):
        act()
        policy.optimizer.zero_grad()
        state = policy.initial_state(2)
        distribution, state = policy.get_distribution(obs, state, starts)
        loss = distribution.log_prob(torch.zeros(2, 1)).sum() + policy.predict_values(obs, state, ~starts).sum()
        loss.backward()
        grads = [p.grad for p in policy.backbone.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("clip_range_vf", [0.0, -0.2])
def test_clip_range_vf_must_be_positive(clip_range_vf):
    with pytest.raises(ValueError, match=f"clip_range_vf={clip_range_vf}: expected a number > 0"):
        tiny(ENVS["box"](), clip_range_vf=clip_range_vf)
    with pytest.raises(AssertionError):  # as SB3's assert
        tiny(ENVS["box"](), clip_range_vf=clip_range_vf)


@pytest.mark.parametrize("clip_range_vf", [None, 0.2, LinearSchedule(0.2, 0.0, 1.0)])
def test_clip_range_vf_takes_none_a_positive_number_or_a_schedule(clip_range_vf):
    tiny(ENVS["box"](), clip_range_vf=clip_range_vf).learn(16)


def test_predict_names_the_mixing_of_gym_and_vec_env_apis():
    model = tiny(make_vec_env(IdentityEnvBox, n_envs=1, seed=0), batch_size=8)
    with pytest.raises(ValueError, match="You are probably mixing Gym API with SB3 VecEnv API"):
        model.predict(IdentityEnvBox().reset(seed=0))  # gymnasium's (obs, info)


@pytest.mark.parametrize("build", [
    lambda: tiny(ENVS["box"](), use_sde=True),
    lambda: tiny(ENVS["box"](), sde_sample_freq=4),
    lambda: tiny(ENVS["box"](), policy={"use_sde": True}),
    lambda: policy_for(spaces.Box(-1, 1, (2,)), use_sde=True),
], ids=["learner-use_sde", "learner-sde_sample_freq", "policy_kwargs", "policy"])
def test_gsde_is_refused_in_one_line_saying_what_to_do(build):
    with pytest.raises(ValueError, match="gSDE .* is not supported by memory policies: leave use_sde"):
        build()


def test_predict_acts_in_evaluation_mode():
    """As SB3's: ``predict`` after ``policy.train()`` puts the policy in evaluation mode (dropout off), so its
    deterministic actions equal those of a policy already in evaluation mode."""
    model = tiny(make_vec_env(IdentityEnv, n_envs=2, env_kwargs={"dim": 4}), "gtrxl",
                 policy={"backbone_kwargs": small_options("gtrxl", **SIZES, dropout=0.5)})
    obs = model.env.reset()
    model.policy.set_training_mode(False)
    expected, _ = model.predict(obs, deterministic=True)
    model.policy.set_training_mode(True)
    for _ in range(5):
        actions, _ = model.predict(obs, deterministic=True)
        assert not model.policy.training and not any(module.training for module in model.policy.modules())
        np.testing.assert_array_equal(actions, expected)


def test_the_policys_device_is_where_its_parameters_are():
    """``policy.device``, read from one head, follows the parameters when they move, as SB3's walk over all does."""
    policy = tiny(make_vec_env(IdentityEnv, n_envs=2, env_kwargs={"dim": 4}), "gtrxl").policy
    assert policy.device == torch.device("cpu")
    policy.to("meta")
    assert policy.device == torch.device("meta") == next(policy.parameters()).device
