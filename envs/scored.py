"""Answer-scoring tasks: every action is an answer, graded right or wrong.

RepeatFirst, RepeatPrevious, CountRecall (POPGym, Morad et al. 2023) and MemoryChain
(bsuite, Osband et al. 2020) share this shape: actions never change what is observed; on a
*scored* step the answer earns `+1/n_scored` if correct and `-1/n_scored` if wrong (0 on
unscored steps), so returns lie in [-1, 1] with optimum 1, as in POPGym.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from envs.batched import BatchedTask
from envs.rules import Range

SYMBOLS = Range(2, integer=True)
"""the rule of `n_symbols`: at least two, or there is nothing to remember"""
WHOLE_LENGTH = Range(2, integer=True)
"""the rule of a whole-episode task's `length`: two steps at least, so that one answer needs memory"""


class ScoredAnswerTask(BatchedTask):
    """Base for tasks whose actions are graded answers; `is_success` = every scored answer right.

    Subclasses give `n_scored` (scored steps per episode), `_scored` (which step indices
    count), `_answer` (the correct answer for the current observation) and `_advance`
    (draw what is observed next). Because actions do not influence observations, the best
    memoryless policy answers, for each observation, the answer most likely given it alone.
    """

    def __init__(self, n_copies: int, max_episode_steps: int | None = None) -> None:
        super().__init__(n_copies, max_episode_steps)
        self.all_correct = np.ones(n_copies, dtype=bool)

    @property
    @abstractmethod
    def n_scored(self) -> int:
        """Number of scored steps per episode."""

    @abstractmethod
    def _scored(self, t: np.ndarray) -> np.ndarray:
        """Per copy: is the action at step index `t` (0-based) scored?"""

    @abstractmethod
    def _answer(self) -> np.ndarray:
        """Per copy: the correct answer to the current observation."""

    @abstractmethod
    def _advance(self) -> None:
        """Move every copy to its next observation (called after grading)."""

    @property
    def optimal_return(self) -> float:
        return 1.0

    def reset(self, idx: np.ndarray) -> None:
        super().reset(idx)
        self.all_correct[idx] = True

    def _transition(self, actions: np.ndarray, final: np.ndarray) -> np.ndarray:
        scored = self._scored(self.elapsed - 1)
        correct = actions == self._answer()
        self.all_correct &= correct | ~scored
        self._advance()
        return np.where(scored, np.where(correct, 1.0, -1.0) / self.n_scored, 0.0)

    def _success(self) -> np.ndarray:
        return self.all_correct


class WholeEpisodeScoredTask(ScoredAnswerTask):
    """A scored task whose `length` = T steps are all scored and whose last answer still
    depends on the first observation: episode length T, memory distance T - 1."""

    def __init__(self, n_copies: int, length: int, max_episode_steps: int | None = None) -> None:
        WHOLE_LENGTH.check("length", length)
        super().__init__(n_copies, max_episode_steps)
        self.length = length

    @property
    def episode_length(self) -> int:
        return self.length

    @property
    def memory_distance(self) -> int:
        return self.length - 1

    @property
    def n_scored(self) -> int:
        return self.length

    def _scored(self, t: np.ndarray) -> np.ndarray:
        return np.ones_like(t, dtype=bool)


def one_hot(values: np.ndarray, depth: int) -> np.ndarray:
    """float32 one-hot rows `(k, depth)` of int values `(k,)`."""
    out = np.zeros((values.shape[0], depth), dtype=np.float32)
    out[np.arange(values.shape[0]), values] = 1.0
    return out
