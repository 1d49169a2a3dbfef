"""MemoryPPO: rollout equals training, save, load and predict (with state), and same seed, same updates;
the SB3 API, observation and action spaces, and the NaN guard."""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback, EvalCallback
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
from stable_baselines3.common.envs import (
    FakeImageEnv,
    IdentityEnv,
    IdentityEnvBox,
    IdentityEnvMultiDiscrete,
    SimpleMultiObsEnv,
)
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv

from agents import MemoryPPO, NonFiniteError
from policies import ATTENTIONS, BACKBONES
from policies.policy import PolicyState
from policies.window import SharedWindows, Window
from tests.conftest import LogpGaps, small_model, tmaze

OPTION_CASES = {f"gtrxl-{name}": ("gtrxl", {"attention": name}) for name in ATTENTIONS
                if name != BACKBONES["gtrxl"].options()["attention"]} | {
    "gtrxl-knn-top1": ("gtrxl", {"attention": "knn", "attention_options": {"top_k": 1}}),
    "gtrxl-linformer-rank2": ("gtrxl", {"attention": "linformer", "attention_options": {"rank": 2}}),
    "gtrxl-image-local-2d": ("gtrxl", {"attention": "image-local", "attention_options": {"width": 3}}),
    "linear-favor": ("linear", {"feature_map": "favor", "n_features": 12}),
    "gtrxl-ff-chunks": ("gtrxl", {"ff_chunks": 3}),
    "gtrxl-episode-time": ("gtrxl", {"episode_time": "sinusoidal"}),
    "trxl-rev-reformer": ("trxl-rev", {"attention": "lsh", "ff_chunks": 3})}
"""GTrXL with each registered attention, kNN retrieval that keeps one older key, Linformer with two projected
slots, the Image Transformer's 2D local attention (3 steps wide), Performer features, a chunked feed-forward, an
encoding of episode time (the buffer's clocks); the reversible backbone with LSH attention and a chunked
feed-forward (Reformer)"""


@pytest.mark.parametrize("backbone", list(BACKBONES) + list(OPTION_CASES))
@pytest.mark.parametrize("segment_length", [1, 4])
def test_rollout_equals_training(backbone, segment_length):
    """Rollout equals training: before any gradient step of an update, recomputed log-probs equal the rollout's.

    Four updates, so windows cross rollout boundaries; TMaze length 3 ends episodes inside rollouts.
    ``gtrxl-<attention>`` runs GTrXL with each registered attention.
    """
    backbone, options = OPTION_CASES.get(backbone, (backbone, None))
    model = small_model(backbone, segment_length=segment_length, backbone_options=options)
    gaps = LogpGaps()
    model.learn(5 * 16 * 4, callback=gaps)
    assert len(gaps.gaps) == 4
    assert max(gaps.gaps) < 1e-5, gaps.gaps


def test_rollout_equals_training_on_the_buffer_directly():
    """The same check without the learner's logging: every minibatch of a fresh buffer."""
    model = small_model("gtrxl", segment_length=4)
    model.learn(3 * 16 * 4)  # windows now carry memory from earlier rollouts
    _, callback = model._setup_learn(16 * 4, None, reset_num_timesteps=False)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, 16)
    assert model.rollout_buffer.episode_starts[1:].any(), "episode starts must occur inside the rollout"
    for batch in model.rollout_buffer.segments(32, 4):
        with torch.no_grad():
            values, distribution, _ = model.policy.evaluate_segments(batch.observations, batch.actions.long().flatten(),
                                                                     batch.states, batch.episode_starts)
        torch.testing.assert_close(distribution.log_prob(batch.actions.long().flatten()), batch.old_log_prob,
                                   atol=1e-5, rtol=0)
        torch.testing.assert_close(values, batch.old_values, atol=1e-5, rtol=0)


def test_buffer_stores_records_not_windows():
    model = small_model("gtrxl", backbone_options={"n_layers": 2}, n_steps=16)
    model.learn(16 * 4)
    history = model.rollout_buffer.histories["pi"]
    M, L, D = 6, 2, 16
    assert history.memory.shape == (4, M + 16, L, D)
    # per (env, step): the window prefix amortised over the rollout plus one record, float32 + validity bytes
    assert model.rollout_buffer.bytes_per_step() == ((M + 16) * L * D * 4 + (M + 16)) // 16


@pytest.mark.parametrize("backbone", ["gtrxl", "lstm"])
def test_save_load_and_predict_with_state(backbone, tmp_path):
    """Save, load and predict: a loaded model acts the same, and a running episode's memory carried
    through ``predict(obs, state, episode_start)`` continues identically after loading."""
    env = tmaze(n_envs=2, length=5)
    model = small_model(backbone, env=env)
    model.learn(16 * 2 * 2)
    model.save(tmp_path / "model.zip")
    loaded = MemoryPPO.load(tmp_path / "model.zip")
    assert loaded.policy.backbone_name == backbone
    obs = env.reset()
    state, starts = None, np.ones(2, dtype=bool)
    for _ in range(3):  # an episode in progress
        actions, state = model.predict(obs, state=state, episode_start=starts, deterministic=True)
        obs, _, dones, _ = env.step(actions)
        starts = dones
    state_copy = {k: {n: v.copy() for n, v in s.items()} for k, s in state.items()}
    a_model, _ = model.predict(obs, state=state, episode_start=starts, deterministic=True)
    a_loaded, _ = loaded.predict(obs, state=state_copy, episode_start=starts, deterministic=True)
    np.testing.assert_array_equal(a_model, a_loaded)
    for (name, params), (_, loaded_params) in zip(model.policy.state_dict().items(),
                                                  loaded.policy.state_dict().items(), strict=True):
        torch.testing.assert_close(params, loaded_params, msg=name)


def test_predict_carries_memory():
    """With the same observation, the policy's output depends on the memory carried in."""
    model = small_model("gtrxl", env=tmaze(n_envs=1, length=5), batch_size=16)
    policy = model.policy
    obs = np.zeros((1, 2), dtype=np.float32)
    _, fresh = model.predict(obs, state=None, episode_start=np.ones(1, dtype=bool))
    _, remembered = model.predict(obs + 1, state=fresh, episode_start=np.zeros(1, dtype=bool))
    _, reset = model.predict(obs + 1, state=fresh, episode_start=np.ones(1, dtype=bool))
    assert remembered["pi"]["valid"].sum() == 2 and reset["pi"]["valid"].sum() == 1
    logits = {}
    for name, state, start in (("remembered", remembered, 0), ("reset", reset, 1)):
        torch_state = PolicyState(**{k: Window.from_dict({n: torch.as_tensor(v) for n, v in s.items()})
                                     for k, s in state.items()})
        with torch.no_grad():
            distribution, _ = policy.get_distribution(torch.as_tensor(obs), torch_state,
                                                      torch.tensor([start], dtype=torch.bool))
        logits[name] = distribution.distribution.logits
    assert not torch.allclose(logits["remembered"], logits["reset"])


def test_same_seed_same_updates():
    """Same seed, same updates: the same seed gives the same parameters after two updates; another seed does not."""
    def trained(seed: int) -> list[torch.Tensor]:
        model = small_model("gtrxl", env=tmaze(seed=seed), seed=seed)
        model.learn(2 * 16 * 4)
        return [p.detach().clone() for p in model.policy.parameters()]

    first, again, other = trained(0), trained(0), trained(1)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


def test_a_time_limit_cut_adds_the_discounted_value_of_its_last_observation_to_integer_rewards():
    """SB3 issue #633: the reward of an episode cut by a time limit gets γ V(terminal observation), that value read
    with the episode's memory, as the next step of the same batch would read it. Only cut episodes get it, and
    integer rewards (SB3's SubprocVecEnv stacks a MiniGrid step's int 0 as int64) are taken, not refused."""
    model = small_model("gtrxl", gamma=0.9)
    env = model.get_env()
    obs = env.reset()
    with torch.inference_mode():
        state = model.policy(torch.as_tensor(obs), model._last_state, torch.ones(4, dtype=torch.bool)).state
        terminal = env.step(np.zeros(4, dtype=np.int64))[0]
        continued = model.policy(torch.as_tensor(terminal), state, torch.zeros(4, dtype=torch.bool)).values.flatten()
    dones = np.array([True, False, True, True])
    infos = [{"terminal_observation": terminal[0], "TimeLimit.truncated": True}, {},
             {"terminal_observation": terminal[2], "TimeLimit.truncated": False},
             {"terminal_observation": terminal[3], "TimeLimit.truncated": True}]
    rewards = model._bootstrap_truncated(np.array([1, 0, 1, 0]), dones, infos, state)
    expected = np.array([1 + 0.9 * continued[0].item(), 0, 1, 0.9 * continued[3].item()])
    np.testing.assert_allclose(rewards, expected, rtol=1e-5, atol=1e-6)


def test_gate_biases_survive_policy_construction():
    """SB3's ortho_init must not overwrite the GTrXL gate bias b_g."""
    model = small_model("gtrxl", backbone_options={"n_layers": 2})
    biases = [p for n, p in model.policy.named_parameters() if n.endswith("gate.bias")]
    assert len(biases) == 4 and all(p.detach().eq(2.0).all() for p in biases)


def test_sb3_evaluate_policy_eval_callback_progress_bar_and_tensorboard(tmp_path):
    model = small_model("gtrxl", tensorboard_log=str(tmp_path))
    eval_callback = EvalCallback(tmaze(n_envs=2), n_eval_episodes=4, eval_freq=16, log_path=str(tmp_path),
                                 best_model_save_path=str(tmp_path), verbose=0)
    model.learn(2 * 16 * 4, callback=eval_callback, progress_bar=True)
    assert (tmp_path / "evaluations.npz").exists() and (tmp_path / "best_model.zip").exists()
    assert list(tmp_path.glob("MemoryPPO_1/events.out.tfevents.*"))
    mean, std = evaluate_policy(model, tmaze(n_envs=3), n_eval_episodes=6)
    assert np.isfinite(mean) and np.isfinite(std)


@pytest.mark.parametrize("env_class", [IdentityEnv, IdentityEnvBox, IdentityEnvMultiDiscrete, FakeImageEnv,
                                       SimpleMultiObsEnv])
def test_observation_and_action_spaces(env_class):
    """Discrete, Box and MultiDiscrete actions; vector, image (NatureCNN) and Dict observations."""
    kwargs = {"dim": 4} if env_class is IdentityEnv else {}
    env = sb3_make_vec_env(env_class, n_envs=2, seed=0, env_kwargs=kwargs)
    model = small_model("gtrxl", env=env, n_steps=8, batch_size=8)
    model.learn(2 * 8 * 2)
    gaps = LogpGaps()
    model.learn(3 * 8 * 2, callback=gaps, reset_num_timesteps=False)
    assert gaps.gaps and max(gaps.gaps) < 1e-5
    actions, _ = model.predict(env.reset(), deterministic=True)
    assert env.action_space.contains(actions[0])


def test_auxiliary_losses_are_added_and_logged():
    model = small_model("ut-act", aux_coefs={"ponder_cost": 0.5})
    model.learn(2 * 16 * 4)
    logged = model.logger.name_to_value
    assert logged["train/aux/ponder_cost"] > 1.0 and 1.0 <= logged["train/aux/ponder_steps"] <= 3.0
    assert small_model("ut-act").aux_coefs == {"ponder_cost": 0.01}


class Poison(BaseCallback):
    """Makes one thing non-finite once the first rollout is collected."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where

    def _on_rollout_end(self) -> None:
        policy = self.model.policy
        u = policy.backbone.layers[0].attn.position.u
        if self.where == "loss":
            self.model.rollout_buffer.advantages[3, 1] = np.nan
        elif self.where == "gradient":
            u.register_hook(lambda grad: grad * float("nan"))
        elif self.where == "parameter":
            policy.optimizer.register_step_post_hook(lambda *_: u.data.fill_(float("inf")))
        elif self.where == "huge parameter":  # finite, but its norm overflows float32
            policy.optimizer.register_step_post_hook(lambda *_: u.data.fill_(1e30))

    def _on_step(self) -> bool:
        return True


@pytest.mark.parametrize("where,message", [
    ("loss", r"non-finite loss .* timestep 64: NaN or infinite values in policy_loss"),
    ("gradient", r"non-finite gradient norm at update 0, timestep 64: NaN or infinite values in "
                 r"backbone.layers.0.attn.position.u$"),
    ("parameter", r"non-finite parameter norm after update \d+, timestep 64: NaN or infinite values in "
                  r"backbone.layers.0.attn.position.u$"),
    ("huge parameter", r"non-finite parameter norm after update \d+, timestep 64: finite values whose norm "
                       r"overflows in backbone.layers.0.attn.position.u \(max \|x\| = 1e\+30\)$"),
])
def test_non_finite_training_stops_and_says_where(where, message):
    """Every guard names the tensors and the step; never an empty list (mutation caught: naming only the
    tensors with a NaN or infinity, which leaves a finite parameter too large for its norm unnamed)."""
    with pytest.raises(NonFiniteError, match=message):
        small_model("gtrxl").learn(2 * 16 * 4, callback=Poison(where))


class NaNAfter(gym.Wrapper):
    """CartPole whose observation turns NaN at its `at`-th step."""

    def __init__(self, at: int) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.at, self.steps = at, 0

    def step(self, action):  # noqa: ANN001, ANN201
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return (obs * np.nan if self.steps == self.at else obs), reward, terminated, truncated, info


def test_a_non_finite_observation_stops_training_and_says_where():
    """The env's NaN stops training with `NonFiniteError` naming the env and the step, before the policy samples
    from it (mutation caught: no check, where torch's multinomial fails on the NaN probabilities)."""
    env = DummyVecEnv([lambda: NaNAfter(at=5), lambda: NaNAfter(at=1000)])
    model = MemoryPPO("MemoryPolicy", env, n_steps=8, batch_size=16, segment_length=8,
                      policy_kwargs={"backbone": "gru", "backbone_kwargs": {"hidden_size": 8}})
    with pytest.raises(NonFiniteError, match=r"^non-finite observation from the env at timestep 10 \(envs \[0\]\)"):
        model.learn(64)


def test_bad_options_name_the_value():
    with pytest.raises(ValueError, match="batch_size=30: expected a multiple of the training segment, "
                                         "segment_length=4"):
        small_model("gtrxl", batch_size=30)
    with pytest.raises(ValueError, match="backbone='gtrx': expected one of"):
        MemoryPPO("MemoryPolicy", tmaze(), policy_kwargs={"backbone": "gtrx"})


def test_the_logger_of_a_model_without_log_folder_writes_under_tmp_path(tmp_path):
    """conftest points SB3's default logger folder at the test's tmp_path: the suite leaves no
    ``SB3-*`` folders in the system temp directory."""
    before = set(Path(tempfile.gettempdir()).glob("SB3-*"))
    model = small_model("mlp")
    model.learn(16 * 4)
    assert Path(model.logger.get_dir()).is_relative_to(tmp_path)
    assert set(Path(tempfile.gettempdir()).glob("SB3-*")) == before


def test_by_env_minibatches_hold_whole_envs_and_share_records():
    """``by-env`` minibatches of 64 single steps from 4 envs × 32 steps are two whole envs each: their
    windows of 16 overlap (10.7 slots per record), so they come as shared records; a bad order
    names the valid ones."""
    model = small_model("gtrxl", segment_length=1, n_steps=32, batch_size=64, minibatch_order="by-env",
                        backbone_options={"memory_length": 16})
    model.learn(32 * 4)
    _, callback = model._setup_learn(32 * 4, None, reset_num_timesteps=False)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, 32)
    seen = []
    for batch in model.rollout_buffer.segments(64, 1, "by-env"):
        assert isinstance(batch.states.pi, SharedWindows), "whole-env windows share their records"
        seen.append(batch.observations)
    assert len(seen) == 2
    with pytest.raises(ValueError, match="minibatch_order='random': expected one of shuffled, by-env"):
        small_model("gtrxl", minibatch_order="random")


def test_a_learned_compression_is_trained_by_its_reconstruction_loss():
    """The learner adds the compressive attention's reconstruction loss, logs it, and it moves ``W`` (the
    values' kernel: this T-Maze's episodes are too short for two slots, whose keys then could compete)."""
    options = {"attention": "compressive", "attention_options": {"compression": "conv", "compression_rate": 2}}
    model = small_model("gtrxl", backbone_options=options)
    assert model.aux_coefs == {"reconstruction": 1.0}
    before = [block.attn.pattern.compress_values.detach().clone() for block in model.policy.backbone.layers]
    model.learn(2 * 16 * 4)
    assert model.logger.name_to_value["train/aux/reconstruction"] > 0.0
    assert all(not torch.equal(block.attn.pattern.compress_values, w)
               for block, w in zip(model.policy.backbone.layers, before, strict=True))


def test_an_adaptive_span_adds_its_penalty_and_logs_the_span():
    """The learner takes the attention's loss coefficients as defaults and logs the span it adds."""
    model = small_model("gtrxl", backbone_options={"attention": "adaptive-span"})
    assert model.aux_coefs == {"span": 1e-3}
    model.learn(2 * 16 * 4)
    assert 0.0 < model.logger.name_to_value["train/aux/span"] <= 1.0


@pytest.mark.parametrize("order", ["shuffled", "by-env"])
def test_rollout_equals_training_with_shared_records(order):
    """Rollout equals training on the shared-records path: windows of 16 over single steps (T = 1) share enough
    records that the buffer hands them once (checked), and the recorded log-probabilities still equal
    the recomputed ones."""
    model = small_model("gtrxl", segment_length=1, n_steps=32, batch_size=128, minibatch_order=order,
                        backbone_options={"memory_length": 16})
    gaps = LogpGaps()
    model.learn(4 * 32 * 4, callback=gaps)
    assert all(isinstance(batch.states.pi, SharedWindows) for batch in model.rollout_buffer.segments(128, 1, order))
    assert len(gaps.gaps) == 3 and max(gaps.gaps) < 1e-5, gaps.gaps


@pytest.mark.parametrize("algo", ["ppo", "vmpo"])
def test_bf16_precision_autocasts_the_update_forward_and_keeps_heads_float32(algo):
    """``precision="bf16"`` runs the update's features and backbone in bfloat16: the recomputed
    log-probabilities then differ from the float32 rollout's by bfloat16 rounding, above rollout equals training's
    1e-5 yet far below a real mismatch; values and log-probabilities reach the losses as float32 and the
    parameters stay float32 (mutation caught: the autocast dropped, which brings the gap under 1e-5)."""
    model = small_model("gtrxl", algo=algo, precision="bf16")
    gaps = LogpGaps()
    model.learn(3 * 16 * 4, callback=gaps)
    assert len(gaps.gaps) == 2 and all(1e-5 < gap < 0.1 for gap in gaps.gaps), gaps.gaps
    batch = next(model.rollout_buffer.segments(32, 4))
    recomputed = model._recompute(batch, defaultdict(list))
    assert recomputed.values.dtype == recomputed.log_prob.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in model.policy.parameters())


def test_an_unknown_precision_names_the_valid_ones():
    with pytest.raises(ValueError, match="'fp16'.*fp32, bf16"):
        small_model("gtrxl", precision="fp16")


def test_the_default_learning_rate_decays_linearly_to_zero_over_the_run():
    """PPO's default step size (docs/notes/tuned-defaults.md: the decay is what stopped solved T-Mazes from being
    unlearned): each update uses 1e-3 times the fraction of the run left after its rollout (SB3's progress, so
the last update's rate is 0). Mutation caught: a constant
    default (or a schedule read at the wrong progress) gives the same rate to every update."""
    model = small_model("gtrxl")
    rates: list[float] = []
    model.policy.optimizer.step = lambda *args, **kwargs: rates.append(model.policy.optimizer.param_groups[0]["lr"])
    model.learn(4 * 16 * 4)  # four rollouts of 16 steps x 4 envs
    per_update = sorted(set(rates), reverse=True)
    assert per_update == pytest.approx([0.75e-3, 0.5e-3, 0.25e-3, 0.0])
