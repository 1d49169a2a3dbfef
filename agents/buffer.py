"""Rollout buffer for memory backbones: each step's record stored once, windows rebuilt by index.

A Transformer-XL memory of `M` steps seen from every step of a rollout would cost
`n_steps · n_envs · layers · M · d` floats if stored per step (as sb3-contrib stores LSTM
states). Here the buffer keeps, per backbone, the window carried into the rollout and the
record each step pushed — `(M + n_steps) · n_envs · layers · d` floats — in one history
tensor, and gathers the window entering any step when a minibatch asks for it
(`policies.window.shared_windows`: each distinct record once, with the slots that point at it).

Minibatches are segments of `segment_length` consecutive steps of one env, time-major:
`T = 1` gives every step its own sample with its stored window; `T > 1` lets the learner
recompute the segment with gradients inside it (Transformer-XL training), starting from the
stored window before the segment. Episode starts inside a segment are handled by the
backbone's masks, so segments are never cut or padded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import torch
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.type_aliases import PyTorchObs
from torch import Tensor

from policies.policy import PolicyState
from policies.window import WindowHistory, episode_clock, episode_ids, shared_windows

MINIBATCH_ORDERS = ("shuffled", "by-env")


class MemoryBatch(NamedTuple):
    """A minibatch of `N` segments of `T` steps; per-step fields are flattened time-major
    (row `t · N + n` is step `t` of segment `n`)."""

    observations: PyTorchObs
    actions: Tensor
    old_values: Tensor
    old_log_prob: Tensor
    advantages: Tensor
    returns: Tensor
    episode_starts: Tensor  # [T, N]
    states: PolicyState  # the window entering each segment, per backbone, as shared records (N windows of M)
    extras: dict[str, Tensor]  # what the learner stored per step with add_extras, [T·N, ...]


class _MemoryStorage:
    """What a memory buffer adds to SB3's rollout buffers: per-backbone window histories and
    segment sampling. Mixed into `RolloutBuffer` and `DictRolloutBuffer`, whose
    storage, `add` and GAE (`compute_returns_and_advantage`) are reused unchanged."""

    buffer_size: int
    n_envs: int
    device: torch.device
    observations: np.ndarray | dict[str, np.ndarray]
    actions: np.ndarray
    values: np.ndarray
    log_probs: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    episode_starts: np.ndarray
    pos: int
    full: bool
    to_torch: Callable[[np.ndarray], Tensor]

    def start_rollout(self, state: PolicyState) -> None:
        """Store the windows carried into the rollout (the prefix of every history)."""
        self.histories: dict[str, WindowHistory] = {}
        self.memory_lengths: dict[str, int] = {}
        self.clocks: dict[str, Tensor] = {}  # episode time entering the rollout, then [E, n_steps] per step
        for name, backbone_state in state.backbones().items():
            if backbone_state.clock is not None:
                self.clocks[name] = backbone_state.clock.to(self.device)
            memory, valid = backbone_state.memory, backbone_state.valid
            M = valid.shape[1]
            history = memory.new_zeros(self.n_envs, M + self.buffer_size, *memory.shape[2:], device=self.device)
            history[:, :M] = memory
            history_valid = torch.ones(self.n_envs, M + self.buffer_size, dtype=torch.bool, device=self.device)
            history_valid[:, :M] = valid
            self.histories[name] = WindowHistory(history, history_valid, torch.empty(0))
            self.memory_lengths[name] = M
        self.extras: dict[str, Tensor] = getattr(self, "extras", {})
        self._tensors: tuple[PyTorchObs, Tensor] | None = None

    def add_records(self, records: dict[str, Tensor]) -> None:
        """Store the record each backbone pushed at the current step (call before `add`)."""
        for name, record in records.items():
            self.histories[name].memory[:, self.memory_lengths[name] + self.pos] = record

    def add_extras(self, extras: dict[str, Tensor]) -> None:
        """Store learner-specific per-step tensors `[n_envs, ...]` (e.g. V-MPO's old distribution)."""
        for name, value in extras.items():
            if name not in self.extras:
                self.extras[name] = value.new_zeros(self.buffer_size, *value.shape, device=self.device)
            self.extras[name][self.pos] = value

    def bytes_per_step(self) -> int:
        """Memory-state bytes stored per env step (the prefix amortised over the rollout)."""
        total = sum(h.memory.element_size() * h.memory[0].numel() + h.valid[0].numel()
                    for h in self.histories.values())
        return total // self.buffer_size

    def compute_returns_and_advantage(self, last_values: Tensor, dones: np.ndarray) -> None:
        """SB3's GAE, then the episode counters that window validity is computed from."""
        super().compute_returns_and_advantage(last_values, dones)  # type: ignore[misc]
        self._tensors = None
        starts = torch.as_tensor(self.episode_starts, device=self.device).bool().T  # [E, n_steps]
        episodes = episode_ids(starts)
        for name, history in self.histories.items():
            counter = torch.cat([episodes.new_zeros(self.n_envs, self.memory_lengths[name]), episodes], dim=1)
            self.histories[name] = history._replace(episode=counter)
        for name, clock in self.clocks.items():  # the state's clock entering every step (before its start)
            self.clocks[name] = torch.cat([clock.view(-1, 1), episode_clock(clock, starts)[:, :-1] + 1], dim=1)

    def segments(self, batch_size: int, segment_length: int, order: str = "shuffled") -> Iterator[MemoryBatch]:
        """Minibatches of `batch_size` steps, in segments of `segment_length` steps, in one of
        `MINIBATCH_ORDERS`: `shuffled` (segments drawn at random from every env) or
        `by-env` (the envs in random order, each env's segments together, so a minibatch holds
        whole envs and its windows share most of their records)."""
        if not self.full:
            raise RuntimeError("the rollout buffer is not full yet")
        T = segment_length
        per_env = self.buffer_size // T
        seg_env = np.repeat(np.arange(self.n_envs), per_env)
        seg_t0 = np.tile(np.arange(per_env) * T, self.n_envs)
        if order == "shuffled":
            order = np.random.permutation(len(seg_env))
        elif order == "by-env":
            order = (np.random.permutation(self.n_envs)[:, None] * per_env + np.arange(per_env)).reshape(-1)
        else:
            raise ValueError(f"unknown minibatch order {order!r}; valid orders: {', '.join(MINIBATCH_ORDERS)}")
        per_batch = batch_size // T
        for first in range(0, len(order), per_batch):
            chosen = order[first:first + per_batch]
            yield self._segment_batch(seg_env[chosen], seg_t0[chosen], T)

    def _steps(self) -> tuple[PyTorchObs, Tensor]:
        """The rollout's observations and its other per-step fields as tensors `[n_steps·n_envs, ...]`, row
        `t·n_envs + e`, built once per rollout: the scalar fields packed in one tensor `[·, A + 5]` (actions,
        values, log-probabilities, advantages, returns, episode starts) that one gather per minibatch reads."""
        if getattr(self, "_tensors", None) is None:
            rows = self.buffer_size * self.n_envs

            def flat(array: np.ndarray) -> Tensor:
                return self.to_torch(array.reshape(rows, *array.shape[2:]))

            observations = ({key: flat(obs) for key, obs in self.observations.items()}
                            if isinstance(self.observations, dict) else flat(self.observations))
            columns = [self.actions.reshape(rows, -1)] + [field.reshape(rows, 1) for field in (
                self.values, self.log_probs, self.advantages, self.returns, self.episode_starts)]
            self._tensors = (observations, self.to_torch(np.concatenate(columns, axis=1, dtype=np.float32)))
        return self._tensors

    def _segment_batch(self, env: np.ndarray, t0: np.ndarray, T: int) -> MemoryBatch:
        N = len(env)
        observations, packed = self._steps()
        env_t, t0_t = torch.as_tensor(env, device=self.device), torch.as_tensor(t0, device=self.device)
        t_t = t0_t[None, :] + torch.arange(T, device=self.device)[:, None]  # [T, N]
        rows = (t_t * self.n_envs + env_t[None, :]).flatten()  # row t·N + n: step t of segment n
        observations = ({key: obs[rows] for key, obs in observations.items()}
                        if isinstance(observations, dict) else observations[rows])
        fields = packed[rows]
        n_actions = fields.shape[1] - 5
        values, log_prob, advantages, returns, starts = fields[:, n_actions:].unbind(1)
        extras = {name: value.flatten(0, 1)[rows] for name, value in self.extras.items()}
        states = PolicyState(**{name: shared_windows(history, env_t, t0_t, self.memory_lengths[name],
                                                     self.clocks[name][env_t, t0_t] if name in self.clocks else None)
                                for name, history in self.histories.items()})
        return MemoryBatch(
            observations=observations,
            actions=fields[:, :n_actions].reshape(T * N, *self.actions.shape[2:]),
            old_values=values,
            old_log_prob=log_prob,
            advantages=advantages,
            returns=returns,
            episode_starts=starts.view(T, N).bool(),
            states=states,
            extras=extras,
        )


class MemoryRolloutBuffer(_MemoryStorage, RolloutBuffer):
    """SB3's `RolloutBuffer` plus episode-memory histories and segment sampling."""


class MemoryDictRolloutBuffer(_MemoryStorage, DictRolloutBuffer):
    """SB3's `DictRolloutBuffer` plus episode-memory histories and segment sampling."""


class _DeviceSteps:
    """SB3's rollout storage and GAE as tensors on the buffer's device: `add` writes a step's tensors in place
    (no host copy), the GAE runs SB3's recursion in float32 tensors."""

    buffer_size: int
    n_envs: int
    obs_shape: tuple[int, ...]
    action_dim: int
    device: torch.device
    gamma: float
    gae_lambda: float
    _tensors: tuple[PyTorchObs, Tensor] | None

    def reset(self) -> None:
        def zeros(*shape: int) -> Tensor:
            return torch.zeros(self.buffer_size, self.n_envs, *shape, device=self.device)

        self.observations, self.actions = zeros(*self.obs_shape), zeros(self.action_dim)
        self.rewards, self.returns, self.episode_starts = zeros(), zeros(), zeros()
        self.values, self.log_probs, self.advantages = zeros(), zeros(), zeros()
        self.pos, self.full, self.generator_ready = 0, False, False
        self._tensors = None

    def add(self, obs: Tensor, action: Tensor, reward: Tensor, episode_start: Tensor, value: Tensor,
            log_prob: Tensor) -> None:
        self.observations[self.pos] = obs.reshape(self.n_envs, *self.obs_shape)
        self.actions[self.pos] = action.reshape(self.n_envs, self.action_dim)
        self.rewards[self.pos] = reward
        self.episode_starts[self.pos] = episode_start
        self.values[self.pos] = value.flatten()
        self.log_probs[self.pos] = log_prob
        self.pos += 1
        self.full = self.pos == self.buffer_size

    def compute_returns_and_advantage(self, last_values: Tensor, dones: Tensor) -> None:
        """SB3's GAE: `δ_t = r_t + γ V_{t+1} (1 − d_{t+1}) − V_t`, `A_t = δ_t + γλ (1 − d_{t+1}) A_{t+1}`."""
        last_gae: Tensor | float = 0
        for step in reversed(range(self.buffer_size)):
            if step == self.buffer_size - 1:
                next_non_terminal, next_values = 1.0 - dones.float(), last_values.flatten()
            else:
                next_non_terminal, next_values = 1.0 - self.episode_starts[step + 1], self.values[step + 1]
            delta = self.rewards[step] + self.gamma * next_values * next_non_terminal - self.values[step]
            last_gae = delta + self.gamma * self.gae_lambda * next_non_terminal * last_gae
            self.advantages[step] = last_gae
        self.returns = self.advantages + self.values

    def _steps(self) -> tuple[PyTorchObs, Tensor]:
        if self._tensors is None:
            rows = self.buffer_size * self.n_envs
            fields = (self.values, self.log_probs, self.advantages, self.returns, self.episode_starts)
            packed = torch.cat([self.actions.reshape(rows, -1), *(f.reshape(rows, 1) for f in fields)], dim=1)
            self._tensors = (self.observations.reshape(rows, *self.obs_shape), packed)
        return self._tensors


class DeviceRolloutBuffer(_MemoryStorage, _DeviceSteps, RolloutBuffer):
    """`MemoryRolloutBuffer` whose every field is a tensor on the device, for envs that step there
    (`envs.torch_tasks.TorchVecEnv`): a rollout writes no step to the host."""

    _steps = _DeviceSteps._steps
