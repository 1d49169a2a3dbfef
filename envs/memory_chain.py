"""MemoryChain, after bsuite's `memory_len` / `memory_size` experiments (Osband et al., ICLR 2020)."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from envs.batched import ALL, COUNT, Index
from envs.scored import ScoredAnswerTask


class MemoryChain(ScoredAnswerTask):
    """Context bits shown once at the start, a query about one of them L steps later.

    What must be remembered: `num_bits` random context bits, for L steps (only the queried
    one matters, but the query comes last).

    * Observation `float32[1 + 2B]` in [-1, 1] for B = `num_bits`:
      `[time-to-live (L - t)/L, one-hot query (B, only at t = L), context as +-1 (B, only at t = 0)]`.
    * Actions `Discrete(2)`: the value of the queried bit.
    * Reward 0 until the last step; at t = L, +1 if the answer equals the queried bit, else -1.
    * Horizon parameter `length` = L (bsuite's `memory_length`) = memory distance;
      episode length L + 1.
    * Optimal return 1; best memoryless return 0 (the query step shows nothing about the bits).

    Unlike bsuite, the query is one-hot and the context is not repeated in the second
    observation, so the memory distance is exactly L.
    """

    def __init__(self, n_copies: int, length: int = 10, num_bits: int = 1,
                 max_episode_steps: int | None = None) -> None:
        self.check_arguments(length, num_bits)
        super().__init__(n_copies, max_episode_steps)
        self.length = length
        self.num_bits = num_bits
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(1 + 2 * num_bits,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.context = np.zeros((n_copies, num_bits), dtype=np.int64)
        self.query = np.zeros(n_copies, dtype=np.int64)
        self._copies = np.arange(n_copies)

    @staticmethod
    def check_arguments(length: int, num_bits: int) -> None:
        """`ConfigError` naming a bad memory length or number of bits."""
        COUNT.check("length", length)
        COUNT.check("num_bits", num_bits)

    @property
    def episode_length(self) -> int:
        return self.length + 1

    @property
    def memory_distance(self) -> int:
        return self.length

    @property
    def n_scored(self) -> int:
        return 1

    @property
    def memoryless_return(self) -> float:
        return 0.0

    def _begin(self, idx: np.ndarray) -> None:
        self.context[idx] = self.rng.integers(idx, 2, size=self.num_bits)
        self.query[idx] = self.rng.integers(idx, self.num_bits)

    def observe(self, idx: Index = ALL) -> np.ndarray:
        t = self.elapsed[idx]
        obs = np.zeros((t.shape[0], 1 + 2 * self.num_bits), dtype=np.float32)
        obs[:, 0] = np.maximum(self.length - t, 0) / self.length
        asked = np.flatnonzero(t == self.length)
        obs[asked, 1 + self.query[idx][asked]] = 1.0
        obs[:, 1 + self.num_bits :] = np.where((t == 0)[:, None], 2.0 * self.context[idx] - 1.0, 0.0)
        return obs

    def _scored(self, t: np.ndarray) -> np.ndarray:
        return t == self.length

    def _answer(self) -> np.ndarray:
        return self.context[self._copies, self.query]

    def _advance(self) -> None:
        """Nothing is drawn during an episode: observations depend only on the step index."""

    def render_text(self, i: int) -> str:
        bits = "".join(str(b) for b in self.context[i])
        return f"t={self.elapsed[i]}/{self.length} context={bits} query=bit {self.query[i]}"
