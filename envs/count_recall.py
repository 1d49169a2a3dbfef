"""CountRecall (POPGym, Morad et al., ICLR 2023), numpy-batched."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from envs.batched import ALL, Index
from envs.rules import Range
from envs.scored import SYMBOLS, WHOLE_LENGTH, WholeEpisodeScoredTask, one_hot

MAX_COUNT = Range(1, integer=True, optional=True)
"""the rule of CountRecall's `max_count` (None: the episode length)"""


class CountRecall(WholeEpisodeScoredTask):
    """Count how often each symbol has been dealt, and report the count of the queried one.

    What must be remembered: a running count per symbol (order-free, set-like memory).

    * Each step deals a symbol v_t and asks about a symbol q_t, both i.i.d. uniform over m
      symbols (POPGym deals from a deck). Observation `float32[2m]`: one-hot v_t, one-hot q_t.
    * Actions `Discrete(C + 1)` with `C = max_count` (default T): the number of times q_t
      has been dealt in steps 0..t (v_t included), clipped at C.
    * Reward `+-1/T` on each of the T steps (POPGym's `error_clamp` grading is not used).
    * Horizon parameter `length` = T = episode length; memory distance T - 1 (the last
      answer still counts the first symbol).
    * Optimal return 1. Best memoryless return `memoryless_return`, computed exactly: with
      only (v_t, q_t) the best guess is the mode of the count given whether v_t = q_t,
      averaged over the unseen step index (-0.505 for T = 16, m = 4).
    """

    def __init__(self, n_copies: int, length: int = 16, n_symbols: int = 4, max_count: int | None = None,
                 max_episode_steps: int | None = None) -> None:
        self.check_arguments(length, n_symbols, max_count)
        super().__init__(n_copies, length, max_episode_steps)
        max_count = length if max_count is None else max_count
        self.n_symbols = n_symbols
        self.max_count = max_count
        self.observation_space = spaces.Box(0.0, 1.0, shape=(2 * n_symbols,), dtype=np.float32)
        self.action_space = spaces.Discrete(max_count + 1)
        self.counts = np.zeros((n_copies, n_symbols), dtype=np.int64)
        self.dealt = np.zeros(n_copies, dtype=np.int64)
        self.query = np.zeros(n_copies, dtype=np.int64)
        self._copies = np.arange(n_copies)

    @staticmethod
    def check_arguments(length: int, n_symbols: int, max_count: int | None) -> None:
        """`ConfigError` naming a bad episode length, alphabet size or count cap."""
        WHOLE_LENGTH.check("length", length)
        SYMBOLS.check("n_symbols", n_symbols)
        MAX_COUNT.check("max_count", max_count)

    @property
    def memoryless_return(self) -> float:
        p = 1.0 / self.n_symbols
        # Distribution of the count dealt before step t, Binomial(t, p), mixed over t uniform in 0..T-1.
        before = np.zeros(self.length + 1)
        pmf = np.zeros(self.length + 1)
        pmf[0] = 1.0
        for _ in range(self.length):
            before += pmf / self.length
            pmf = np.concatenate([[0.0], pmf[:-1]]) * p + pmf * (1.0 - p)
        accuracy = 0.0
        for match, p_match in ((1, p), (0, 1.0 - p)):  # v_t = q_t adds one to the count
            count = np.concatenate([np.zeros(match), before[: self.length + 1 - match]])
            clipped = np.append(count[: self.max_count], count[self.max_count :].sum())
            accuracy += p_match * clipped.max()
        return 2.0 * accuracy - 1.0

    def _deal(self, idx: Index) -> None:
        dealt, query = self.rng.integers(idx, self.n_symbols, size=2).T
        self.dealt[idx] = dealt
        self.query[idx] = query
        self.counts[self._copies[idx], dealt] += 1

    def _begin(self, idx: np.ndarray) -> None:
        self.counts[idx] = 0
        self._deal(idx)

    def observe(self, idx: Index = ALL) -> np.ndarray:
        return np.concatenate([one_hot(self.dealt[idx], self.n_symbols), one_hot(self.query[idx], self.n_symbols)],
                              axis=1)

    def _answer(self) -> np.ndarray:
        return np.minimum(self.counts[self._copies, self.query], self.max_count)

    def _advance(self) -> None:
        self._deal(ALL)

    def render_text(self, i: int) -> str:
        return (f"t={self.elapsed[i]}/{self.length} dealt {self.dealt[i]}, query {self.query[i]}; "
                f"counts {self.counts[i].tolist()} -> answer {min(self.counts[i, self.query[i]], self.max_count)}")
