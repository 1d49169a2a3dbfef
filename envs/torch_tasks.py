"""engram's numpy-batched tasks in torch, on any device, step for step equal to the numpy cores.

`TorchVecEnv` steps `n` copies of a `TorchTask` with tensor operations of fixed shape: observations, actions,
rewards and dones stay on the device, and nothing is read back per step (episode returns, lengths and successes
are gathered on the device, `TorchVecEnv.pop_episodes` reads them once). Randomness is the numpy cores'
SplitMix64 per copy, in int64 arithmetic (wrapping products, masked right shifts), so a torch copy and a numpy copy
seeded alike produce the same episodes. `make_torch_vec_env` builds one for the ids of `TORCH_TASKS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices
from torch import Tensor

from envs.batched import _GOLDEN_GAMMA, _MIX_1, _MIX_2, check_core, discrete_actions
from envs.count_recall import CountRecall
from envs.memory_chain import MemoryChain
from envs.repeat import RepeatFirst, RepeatPrevious
from envs.tmaze import TMaze
from envs.vec_env import CopySeeding


def _signed(word: np.uint64) -> int:
    """A uint64 constant as the int64 with the same bits."""
    value = int(word)
    return value - (1 << 64) if value >= 1 << 63 else value


GAMMA, MIX_1, MIX_2 = _signed(_GOLDEN_GAMMA), _signed(_MIX_1), _signed(_MIX_2)


def _shr(z: Tensor, k: int) -> Tensor:
    """Logical right shift of int64 words: `z >>> k`."""
    return (z >> k) & ((1 << (64 - k)) - 1)


def mix64(z: Tensor) -> Tensor:
    """SplitMix64's finaliser on int64 words (products wrap modulo 2⁶⁴ as uint64's do)."""
    z = (z ^ _shr(z, 30)) * MIX_1
    z = (z ^ _shr(z, 27)) * MIX_2
    return z ^ _shr(z, 31)


class TorchStreams:
    """`envs.batched.CopyStreams` on a device: one SplitMix64 stream per copy, advanced where a mask is set."""

    def __init__(self, n_copies: int, device: torch.device) -> None:
        self.state = torch.zeros(n_copies, dtype=torch.int64, device=device)
        self.seed(np.arange(n_copies), [None] * n_copies)

    def seed(self, idx: np.ndarray, seeds: Sequence[int | None]) -> None:
        words = [_signed(np.random.SeedSequence(s).generate_state(1, np.uint64)[0]) for s in seeds]
        self.state[torch.as_tensor(idx, device=self.state.device)] = torch.tensor(words, device=self.state.device)

    def integers(self, mask: Tensor | None, high: int, size: int | None = None) -> Tensor:
        """Uniform ints in `[0, high)` for every copy, `(n,)` or `(n, size)`; only the streams of copies in
        `mask` (all when `None`) advance, as the numpy streams of the copies drawn for."""
        steps = torch.arange(1, (size or 1) + 1, device=self.state.device)
        states = self.state[:, None] + steps * GAMMA
        self.state = states[:, -1] if mask is None else torch.where(mask, states[:, -1], self.state)
        words = (_shr(mix64(states), 32) * high) >> 32
        return words if size is not None else words[:, 0]


class TorchTask(ABC):
    """The torch counterpart of `envs.batched.BatchedTask`: `n` copies as tensors on `device`, reset by masks; a
    subclass checks its arguments with its numpy twin's `check_arguments`, so both refuse the same ones."""

    observation_space: spaces.Box
    action_space: spaces.Discrete
    episode_length: int

    def __init__(self, n_copies: int, max_episode_steps: int | None, device: torch.device | str) -> None:
        check_core(n_copies, max_episode_steps)
        self.n_copies = n_copies
        self.max_episode_steps = max_episode_steps
        self.device = torch.device(device)
        self.rng = TorchStreams(n_copies, self.device)
        self.elapsed = self.zeros()

    def zeros(self, dtype: torch.dtype = torch.int64, *shape: int) -> Tensor:
        return torch.zeros(self.n_copies, *shape, dtype=dtype, device=self.device)

    @abstractmethod
    def _begin(self, mask: Tensor) -> None:
        """Start the hidden state of new episodes where `mask` is set."""

    @abstractmethod
    def observe(self) -> Tensor:
        """The observations `float32 (n, obs_dim)`."""

    @abstractmethod
    def _transition(self, actions: Tensor, final: Tensor) -> Tensor:
        """Apply one action per copy (`elapsed` already counts it); the rewards, float64."""

    @abstractmethod
    def _success(self) -> Tensor:
        """Per copy: did the episode that has just terminated succeed?"""

    def reset(self, mask: Tensor) -> None:
        self.elapsed = torch.where(mask, 0, self.elapsed)
        self._begin(mask)

    def step(self, actions: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """`(reward float32, terminated, truncated, success)` as `BatchedTask.step`."""
        self.elapsed = self.elapsed + 1
        terminated = self.elapsed >= self.episode_length
        reward = self._transition(actions.reshape(self.n_copies).long(), terminated).float()
        truncated = (torch.zeros_like(terminated) if self.max_episode_steps is None
                     else ~terminated & (self.elapsed >= self.max_episode_steps))
        return reward, terminated, truncated, terminated & self._success()


_DX = (1, 0, -1, 0)
_DY = (0, 1, 0, -1)


class TorchTMaze(TorchTask):
    """`envs.tmaze.TMaze` in torch (`oracle_length` 0: passive, 1: active)."""

    def __init__(self, n_copies: int, length: int = 10, penalty: float | None = None,
                 max_episode_steps: int | None = None, oracle_length: int = 0,
                 device: torch.device | str = "cpu") -> None:
        TMaze.check_arguments(length, penalty)
        super().__init__(n_copies, max_episode_steps, device)
        self.length, self.oracle_length = length, oracle_length
        self.penalty = -1.0 / length if penalty is None else float(penalty)
        self.junction = oracle_length + length
        self.episode_length = length + 2 * oracle_length + 1
        self._open = torch.zeros(5, self.junction + 3, dtype=torch.bool, device=self.device)
        self._open[2, 1:self.junction + 2] = True
        self._open[[1, 3], self.junction + 1] = True
        self._dx = torch.tensor(_DX, device=self.device)
        self._dy = torch.tensor(_DY, device=self.device)
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(4)
        self.x, self.y, self.goal = self.zeros(), self.zeros(), self.zeros() + 1
        self.oracle_visited, self.cue_shown = self.zeros(torch.bool), self.zeros(torch.bool)

    def _begin(self, mask: Tensor) -> None:
        self.goal = torch.where(mask, 2 * self.rng.integers(mask, 2) - 1, self.goal)
        self.x = torch.where(mask, self.oracle_length, self.x)
        self.y = torch.where(mask, 0, self.y)
        at_oracle = self.oracle_length == 0
        self.oracle_visited = torch.where(mask, at_oracle, self.oracle_visited)
        self.cue_shown = torch.where(mask, at_oracle, self.cue_shown)

    def observe(self) -> Tensor:
        at_junction = self.x == self.junction
        second = torch.where(at_junction, self.y, torch.where(self.cue_shown, self.goal, 0))
        return torch.stack([at_junction, second], dim=1).float()

    def _transition(self, actions: Tensor, final: Tensor) -> Tensor:
        x, y = self.x + self._dx[actions], self.y + self._dy[actions]
        valid = self._open[y + 2, x + 1]
        self.x, self.y = torch.where(valid, x, self.x), torch.where(valid, y, self.y)
        self.cue_shown = (self.x == 0) & ~self.oracle_visited
        self.oracle_visited = self.oracle_visited | self.cue_shown
        behind = self.x < self.elapsed - self.oracle_length
        penalty = torch.where(behind, self.penalty, 0.0).double()
        return torch.where(final, (self.y == self.goal).double(), penalty)

    def _success(self) -> Tensor:
        return self.y == self.goal


class TorchScored(TorchTask):
    """`envs.scored.ScoredAnswerTask` in torch: `±1/n_scored` for an answer on a scored step."""

    n_scored: int

    def __init__(self, n_copies: int, max_episode_steps: int | None, device: torch.device | str) -> None:
        super().__init__(n_copies, max_episode_steps, device)
        self.all_correct = self.zeros(torch.bool) | True

    @abstractmethod
    def _scored(self, t: Tensor) -> Tensor: ...

    @abstractmethod
    def _answer(self) -> Tensor: ...

    def _advance(self) -> None:
        """Draw what is observed next (nothing by default)."""

    def reset(self, mask: Tensor) -> None:
        super().reset(mask)
        self.all_correct = self.all_correct | mask

    def _transition(self, actions: Tensor, final: Tensor) -> Tensor:
        scored = self._scored(self.elapsed - 1)
        correct = actions == self._answer()
        self.all_correct = self.all_correct & (correct | ~scored)
        self._advance()
        answer = torch.where(correct, 1.0, -1.0).double() / self.n_scored
        return torch.where(scored, answer, 0.0)

    def _success(self) -> Tensor:
        return self.all_correct


class TorchMemoryChain(TorchScored):
    """`envs.memory_chain.MemoryChain` in torch."""

    def __init__(self, n_copies: int, length: int = 10, num_bits: int = 1, max_episode_steps: int | None = None,
                 device: torch.device | str = "cpu") -> None:
        MemoryChain.check_arguments(length, num_bits)
        super().__init__(n_copies, max_episode_steps, device)
        self.length, self.num_bits, self.n_scored = length, num_bits, 1
        self.episode_length = length + 1
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(1 + 2 * num_bits,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.context, self.query = self.zeros(torch.int64, num_bits), self.zeros()

    def _begin(self, mask: Tensor) -> None:
        self.context = torch.where(mask[:, None], self.rng.integers(mask, 2, size=self.num_bits), self.context)
        self.query = torch.where(mask, self.rng.integers(mask, self.num_bits), self.query)

    def observe(self) -> Tensor:
        t = self.elapsed
        clock = ((self.length - t).clamp(min=0).double() / self.length).float()[:, None]
        asked = torch.nn.functional.one_hot(self.query, self.num_bits) * (t == self.length)[:, None]
        context = torch.where((t == 0)[:, None], 2.0 * self.context - 1.0, 0.0)
        return torch.cat([clock, asked.float(), context.float()], dim=1)

    def _scored(self, t: Tensor) -> Tensor:
        return t == self.length

    def _answer(self) -> Tensor:
        return self.context.gather(1, self.query[:, None])[:, 0]


class TorchRepeatFirst(TorchScored):
    """`envs.repeat.RepeatFirst` in torch."""

    def __init__(self, n_copies: int, length: int = 16, n_symbols: int = 4, max_episode_steps: int | None = None,
                 device: torch.device | str = "cpu") -> None:
        RepeatFirst.check_arguments(length, n_symbols)
        super().__init__(n_copies, max_episode_steps, device)
        self.length, self.n_symbols, self.n_scored, self.episode_length = length, n_symbols, length, length
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n_symbols + 1,), dtype=np.float32)
        self.action_space = spaces.Discrete(n_symbols)
        self.first, self.symbol = self.zeros(), self.zeros()

    def _begin(self, mask: Tensor) -> None:
        drawn = self.rng.integers(mask, self.n_symbols)
        self.first, self.symbol = torch.where(mask, drawn, self.first), torch.where(mask, drawn, self.symbol)

    def observe(self) -> Tensor:
        symbol = torch.nn.functional.one_hot(self.symbol, self.n_symbols).float()
        return torch.cat([symbol, (self.elapsed == 0).float()[:, None]], dim=1)

    def _scored(self, t: Tensor) -> Tensor:
        return torch.ones_like(t, dtype=torch.bool)

    def _answer(self) -> Tensor:
        return self.first

    def _advance(self) -> None:
        self.symbol = self.rng.integers(None, self.n_symbols)


class TorchRepeatPrevious(TorchScored):
    """`envs.repeat.RepeatPrevious` in torch: the last `k + 1` symbols in a ring, step `t` at `t mod (k+1)`."""

    def __init__(self, n_copies: int, k: int = 4, length: int | None = None, n_symbols: int = 4,
                 max_episode_steps: int | None = None, device: torch.device | str = "cpu") -> None:
        RepeatPrevious.check_arguments(k, length, n_symbols)
        super().__init__(n_copies, max_episode_steps, device)
        self.k, self.length, self.n_symbols = k, 4 * k if length is None else length, n_symbols
        self.episode_length, self.n_scored = self.length, self.length - k
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n_symbols,), dtype=np.float32)
        self.action_space = spaces.Discrete(n_symbols)
        self.history = self.zeros(torch.int64, k + 1)

    def _slot(self, t: Tensor) -> Tensor:
        return (t % (self.k + 1))[:, None]

    def _begin(self, mask: Tensor) -> None:
        first = torch.where(mask, self.rng.integers(mask, self.n_symbols), self.history[:, 0])
        self.history = torch.cat([first[:, None], self.history[:, 1:]], dim=1)

    def observe(self) -> Tensor:
        shown = self.history.gather(1, self._slot(self.elapsed))[:, 0]
        return torch.nn.functional.one_hot(shown, self.n_symbols).float()

    def _scored(self, t: Tensor) -> Tensor:
        return t >= self.k

    def _answer(self) -> Tensor:
        return self.history.gather(1, self._slot(self.elapsed - 1 - self.k))[:, 0]

    def _advance(self) -> None:
        drawn = self.rng.integers(None, self.n_symbols)[:, None]
        self.history = self.history.scatter(1, self._slot(self.elapsed), drawn)


class TorchCountRecall(TorchScored):
    """`envs.count_recall.CountRecall` in torch."""

    def __init__(self, n_copies: int, length: int = 16, n_symbols: int = 4, max_count: int | None = None,
                 max_episode_steps: int | None = None, device: torch.device | str = "cpu") -> None:
        CountRecall.check_arguments(length, n_symbols, max_count)
        super().__init__(n_copies, max_episode_steps, device)
        self.length, self.n_symbols, self.n_scored, self.episode_length = length, n_symbols, length, length
        self.max_count = length if max_count is None else max_count
        self.observation_space = spaces.Box(0.0, 1.0, shape=(2 * n_symbols,), dtype=np.float32)
        self.action_space = spaces.Discrete(self.max_count + 1)
        self.counts, self.dealt, self.query = self.zeros(torch.int64, n_symbols), self.zeros(), self.zeros()

    def _deal(self, mask: Tensor | None) -> None:
        dealt, query = self.rng.integers(mask, self.n_symbols, size=2).unbind(1)
        add = torch.nn.functional.one_hot(dealt, self.n_symbols)
        if mask is not None:
            dealt, query = torch.where(mask, dealt, self.dealt), torch.where(mask, query, self.query)
            add = add * mask[:, None]
        self.dealt, self.query, self.counts = dealt, query, self.counts + add

    def _begin(self, mask: Tensor) -> None:
        self.counts = torch.where(mask[:, None], 0, self.counts)
        self._deal(mask)

    def observe(self) -> Tensor:
        return torch.cat([torch.nn.functional.one_hot(self.dealt, self.n_symbols),
                          torch.nn.functional.one_hot(self.query, self.n_symbols)], dim=1).float()

    def _scored(self, t: Tensor) -> Tensor:
        return torch.ones_like(t, dtype=torch.bool)

    def _answer(self) -> Tensor:
        return self.counts.gather(1, self.query[:, None])[:, 0].clamp(max=self.max_count)

    def _advance(self) -> None:
        self._deal(None)


TORCH_TASKS: dict[str, Any] = {
    "TMaze-v0": lambda n, **kw: TorchTMaze(n, oracle_length=0, **kw),
    "TMazeActive-v0": lambda n, **kw: TorchTMaze(n, oracle_length=1, **kw),
    "MemoryChain-v0": TorchMemoryChain,
    "RepeatFirst-v0": TorchRepeatFirst,
    "RepeatPrevious-v0": TorchRepeatPrevious,
    "CountRecall-v0": TorchCountRecall,
}
"""engram ids with a torch implementation, and its constructor ``(n_copies, **env_kwargs, device=...)``"""


class TorchVecEnv(CopySeeding, VecEnv):
    """An SB3 `VecEnv` whose observations, actions, rewards and dones are tensors on the task's device.

    SB3 semantics without per-step host reads: a copy whose episode ends is reset in the same step; the observation
    it ended on is `terminal_obs` (all copies, `[n, obs_dim]`), whether it was cut by the time limit is
    `truncated`; `infos` are empty. Finished episodes are recorded on the device, and
    `pop_episodes` returns them as SB3's `{"r", "l", "is_success"}` in one read.
    """

    on_device = True

    def __init__(self, task: TorchTask) -> None:
        self.task = task
        self.device = task.device
        self.can_truncate = task.max_episode_steps is not None
        self._actions: Tensor | None = None
        self.render_mode = None
        super().__init__(task.n_copies, task.observation_space, task.action_space)
        self._episodes: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
        self._return = torch.zeros(task.n_copies, device=self.device)
        self._length = task.zeros()
        self.terminal_obs = torch.zeros(task.n_copies, *task.observation_space.shape, device=self.device)
        self.truncated = task.zeros(torch.bool)

    def reset(self) -> Tensor:
        seeded = [i for i, s in enumerate(self._seeds) if s is not None]
        if seeded:
            self.task.rng.seed(np.array(seeded), [self._seeds[i] for i in seeded])
        self.task.reset(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        self._return.zero_()
        self._length.zero_()
        self._reset_seeds()
        self._reset_options()
        return self.task.observe()

    def step_async(self, actions: Any) -> None:
        """`ValueError` unless one action per copy, each in the action space; the range of a tensor already on an
        accelerator (the learner's sample, in the space by construction) is not checked: that would read it back."""
        if not isinstance(actions, Tensor) or actions.device.type == "cpu":
            actions = torch.from_numpy(discrete_actions(actions, self.action_space.n, self.num_envs))
        elif actions.numel() != self.num_envs:
            raise ValueError(f"actions must be {self.num_envs}, one per copy, got shape {tuple(actions.shape)}")
        self._actions = actions.to(self.device)

    def step_wait(self) -> tuple[Tensor, Tensor, Tensor, list[dict[str, Any]]]:
        assert self._actions is not None
        reward, terminated, truncated, success = self.task.step(self._actions)
        dones = terminated | truncated
        self.terminal_obs, self.truncated = self.task.observe(), truncated
        self._return = self._return + reward
        self._length = self._length + 1
        self._episodes.append((dones, self._return, self._length, success))
        self._return = torch.where(dones, 0.0, self._return)
        self._length = torch.where(dones, 0, self._length)
        self.task.reset(dones)
        obs = torch.where(dones[:, None], self.task.observe(), self.terminal_obs)
        return obs, reward, dones, []

    def pop_episodes(self) -> list[dict[str, Any]]:
        """The episodes finished since the last call, in the order they ended: `{"r", "l", "is_success"}`."""
        if not self._episodes:
            return []
        dones, returns, lengths, success = (torch.stack(x).cpu() for x in zip(*self._episodes, strict=True))
        self._episodes = []
        return [{"r": float(returns[t, i]), "l": int(lengths[t, i]), "is_success": bool(success[t, i])}
                for t, i in dones.nonzero().tolist()]

    def close(self) -> None:
        """Nothing to release."""

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        target = self.task if hasattr(self.task, attr_name) else self
        return [getattr(target, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self.task, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        raise NotImplementedError(f"{type(self).__name__} has no per-copy methods ({method_name})")

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]


def make_torch_vec_env(env_id: str, n_envs: int = 1, seed: int | None = None, device: torch.device | str = "cpu",
                       **env_kwargs: Any) -> TorchVecEnv:
    """A `TorchVecEnv` of `n_envs` copies of the engram task `env_id` on `device`, copy `i` seeded
    `copy_seeds(seed, n_envs)[i]` at the first reset, as `envs.make_vec_env` seeds the numpy core."""
    if env_id not in TORCH_TASKS:
        raise ValueError(f"{env_id!r} has no torch implementation; those that do: {', '.join(TORCH_TASKS)}")
    venv = TorchVecEnv(TORCH_TASKS[env_id](n_envs, device=device, **env_kwargs))
    if seed is not None:
        venv.seed(seed)
    return venv
