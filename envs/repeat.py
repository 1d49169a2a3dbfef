"""RepeatFirst and RepeatPrevious (POPGym, Morad et al., ICLR 2023), numpy-batched.

POPGym deals cards from a deck; here symbols are drawn i.i.d. uniformly from
`n_symbols` (POPGym's 4 suits by default), so that no observation carries information
about an earlier one and the memoryless optimum is exact.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from envs.batched import ALL, COUNT, Index
from envs.rules import Range
from envs.scored import SYMBOLS, WHOLE_LENGTH, ScoredAnswerTask, WholeEpisodeScoredTask, one_hot


class RepeatFirst(WholeEpisodeScoredTask):
    """Recall the first symbol of the episode at every step (POPGym RepeatFirst).

    What must be remembered: the first observation, for the whole episode.

    * Observation `float32[n_symbols + 1]`: one-hot of the current symbol, then a flag that
      is 1 on the first step only.
    * Actions `Discrete(n_symbols)`: the first symbol.
    * Reward `+1/T` for a correct answer, `-1/T` for a wrong one, on each of the T steps.
    * Horizon parameter `length` = T = episode length; memory distance T - 1.
    * Optimal return 1. Best memoryless return `(1 + (T - 1)(2/m - 1)) / T` for m symbols
      (right on the first step, chance afterwards): -0.406 for T = 16, m = 4.
    """

    def __init__(self, n_copies: int, length: int = 16, n_symbols: int = 4,
                 max_episode_steps: int | None = None) -> None:
        self.check_arguments(length, n_symbols)
        super().__init__(n_copies, length, max_episode_steps)
        self.n_symbols = n_symbols
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n_symbols + 1,), dtype=np.float32)
        self.action_space = spaces.Discrete(n_symbols)
        self.first = np.zeros(n_copies, dtype=np.int64)
        self.symbol = np.zeros(n_copies, dtype=np.int64)

    @staticmethod
    def check_arguments(length: int, n_symbols: int) -> None:
        """`ConfigError` naming a bad episode length or alphabet size."""
        WHOLE_LENGTH.check("length", length)
        SYMBOLS.check("n_symbols", n_symbols)

    @property
    def memoryless_return(self) -> float:
        return (1.0 + (self.length - 1) * (2.0 / self.n_symbols - 1.0)) / self.length

    def _begin(self, idx: np.ndarray) -> None:
        self.first[idx] = self.symbol[idx] = self.rng.integers(idx, self.n_symbols)

    def observe(self, idx: Index = ALL) -> np.ndarray:
        is_first = (self.elapsed[idx] == 0).astype(np.float32)
        return np.concatenate([one_hot(self.symbol[idx], self.n_symbols), is_first[:, None]], axis=1)

    def _answer(self) -> np.ndarray:
        return self.first

    def _advance(self) -> None:
        self.symbol = self.rng.integers(ALL, self.n_symbols)

    def render_text(self, i: int) -> str:
        return (f"t={self.elapsed[i]}/{self.length} shows symbol {self.symbol[i]}; "
                f"answer: first symbol {self.first[i]}")


class RepeatPrevious(ScoredAnswerTask):
    """Output the symbol observed k steps ago (POPGym RepeatPrevious).

    What must be remembered: the last k + 1 observations (a sliding window).

    * Observation `float32[n_symbols]`: one-hot of the current symbol.
    * Actions `Discrete(n_symbols)`: the symbol seen k steps before the current one.
    * Reward: steps t < k are not scored (0); from step k on, `+-1/(T - k)`.
    * Horizon parameter `k` = memory distance; episode length `length` = T (default 4k).
    * Optimal return 1. Best memoryless return `2/m - 1` (chance on every scored step):
      -0.5 for m = 4.
    """

    def __init__(self, n_copies: int, k: int = 4, length: int | None = None, n_symbols: int = 4,
                 max_episode_steps: int | None = None) -> None:
        self.check_arguments(k, length, n_symbols)
        super().__init__(n_copies, max_episode_steps)
        self.k = k
        self.length = 4 * k if length is None else length
        self.n_symbols = n_symbols
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n_symbols,), dtype=np.float32)
        self.action_space = spaces.Discrete(n_symbols)
        # Ring buffer of the last k + 1 symbols: the symbol of step t sits in slot t % (k + 1).
        self.history = np.zeros((n_copies, k + 1), dtype=np.int64)
        self._copies = np.arange(n_copies)

    @staticmethod
    def check_arguments(k: int, length: int | None, n_symbols: int) -> None:
        """`ConfigError` naming a bad distance, episode length (longer than `k`) or alphabet size."""
        COUNT.check("k", k)
        Range(k + 1, integer=True, optional=True, note=f"longer than k={k}").check("length", length)
        SYMBOLS.check("n_symbols", n_symbols)

    @property
    def episode_length(self) -> int:
        return self.length

    @property
    def memory_distance(self) -> int:
        return self.k

    @property
    def n_scored(self) -> int:
        return self.length - self.k

    @property
    def memoryless_return(self) -> float:
        return 2.0 / self.n_symbols - 1.0

    def _begin(self, idx: np.ndarray) -> None:
        self.history[idx, 0] = self.rng.integers(idx, self.n_symbols)

    def observe(self, idx: Index = ALL) -> np.ndarray:
        copies = self._copies[idx]
        return one_hot(self.history[copies, self.elapsed[idx] % (self.k + 1)], self.n_symbols)

    def _scored(self, t: np.ndarray) -> np.ndarray:
        return t >= self.k

    def _answer(self) -> np.ndarray:
        return self.history[self._copies, (self.elapsed - 1 - self.k) % (self.k + 1)]

    def _advance(self) -> None:
        self.history[self._copies, self.elapsed % (self.k + 1)] = self.rng.integers(ALL, self.n_symbols)

    def render_text(self, i: int) -> str:
        t = self.elapsed[i]
        shown = self.history[i, t % (self.k + 1)]
        target = self.history[i, (t - self.k) % (self.k + 1)] if t >= self.k else None
        return f"t={t}/{self.length} shows symbol {shown}; answer: symbol of step t-{self.k} = {target}"
