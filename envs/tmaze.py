"""T-Maze, passive and active (Ni, Ma, Eysenbach & Bacon, "When do Transformers Shine in RL?
Decoupling Memory from Credit Assignment", NeurIPS 2023; after Bakker 2001).

Layout for corridor length L and oracle length o (0 passive, 1 active)::

                          G(+1)
    O --- S ------------- J
                          G(-1)

The oracle O is at x = 0, the start S at x = o, the junction J at x = o + L; the two goal
candidates sit above and below J (y = +1 / -1). Moves that leave the maze are no-ops.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from envs.batched import ALL, COUNT, BatchedTask, Index
from envs.rules import Range

RIGHT, UP, LEFT, DOWN = 0, 1, 2, 3
_DX = np.array([1, 0, -1, 0], dtype=np.int64)  # per action: right, up, left, down
_DY = np.array([0, 1, 0, -1], dtype=np.int64)
PENALTY = Range(high=0, optional=True)
"""the rule of T-Maze's `penalty` (None: -1/length)"""
_CELL_COLOURS = {
    "wall": (40, 40, 40),
    "floor": (230, 230, 230),
    "oracle": (250, 200, 40),
    "goal": (60, 180, 75),
    "decoy": (200, 60, 60),
    "agent": (30, 90, 220),
}


class TMaze(BatchedTask):
    """T-Maze with the paper's ambiguous-position observation; `oracle_length` picks the variant.

    What must be remembered: the goal side, a single bit shown at the oracle only on the
    first visit, until the agent chooses up or down at the junction.

    * Observation `float32[2]` in [-1, 1]: `[0, 0]` in the corridor, `[0, g]` at the
      oracle on its first visit (g = +1 up / -1 down), `[1, y]` at the junction (y = 0)
      and on a goal candidate (y = +/-1).
    * Actions `Discrete(4)`: 0 right, 1 up, 2 left, 3 down.
    * Reward: on every step but the last, `penalty` (default -1/L) if the agent is behind
      the optimal schedule (x < t - o after t actions); on the last step, 1 if the agent
      stands on the goal that was shown, else 0. `is_success` = reached the shown goal.
    * Episode length `L + 2o + 1`: exactly enough for the optimal path.
    * Optimal return 1. Best memoryless return 0.5: the junction observation is the same for
      both goals, and any detour that could encode the cue in position or timing leaves no
      time to reach a goal.
    """

    oracle_length: int

    def __init__(self, n_copies: int, length: int = 10, penalty: float | None = None,
                 max_episode_steps: int | None = None) -> None:
        self.check_arguments(length, penalty)
        super().__init__(n_copies, max_episode_steps)
        self.length = length
        self.penalty = -1.0 / length if penalty is None else float(penalty)
        self.junction = self.oracle_length + length
        # Walkable cells, indexed [y + 2, x + 1] with a wall margin wide enough for any move.
        self._open = np.zeros((5, self.junction + 3), dtype=bool)
        self._open[2, 1 : self.junction + 2] = True
        self._open[[1, 3], self.junction + 1] = True
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(4)
        self.x = np.zeros(n_copies, dtype=np.int64)
        self.y = np.zeros(n_copies, dtype=np.int64)
        self.goal = np.ones(n_copies, dtype=np.int64)
        self.oracle_visited = np.zeros(n_copies, dtype=bool)
        self.cue_shown = np.zeros(n_copies, dtype=bool)

    @staticmethod
    def check_arguments(length: int, penalty: float | None) -> None:
        """`ConfigError` naming a bad corridor length or penalty."""
        COUNT.check("length", length)
        PENALTY.check("penalty", penalty)

    @property
    def episode_length(self) -> int:
        return self.length + 2 * self.oracle_length + 1

    @property
    def memory_distance(self) -> int:
        return self.length + self.oracle_length

    @property
    def optimal_return(self) -> float:
        return 1.0

    @property
    def memoryless_return(self) -> float:
        return 0.5

    def _begin(self, idx: np.ndarray) -> None:
        self.goal[idx] = 2 * self.rng.integers(idx, 2) - 1
        self.x[idx] = self.oracle_length
        self.y[idx] = 0
        at_oracle = self.oracle_length == 0
        self.oracle_visited[idx] = at_oracle
        self.cue_shown[idx] = at_oracle

    def observe(self, idx: Index = ALL) -> np.ndarray:
        at_junction = self.x[idx] == self.junction
        obs = np.empty((at_junction.shape[0], 2), dtype=np.float32)
        obs[:, 0] = at_junction
        obs[:, 1] = np.where(at_junction, self.y[idx], np.where(self.cue_shown[idx], self.goal[idx], 0))
        return obs

    def _transition(self, actions: np.ndarray, final: np.ndarray) -> np.ndarray:
        x, y = self.x + _DX[actions], self.y + _DY[actions]
        valid = self._open[y + 2, x + 1]
        self.x = np.where(valid, x, self.x)
        self.y = np.where(valid, y, self.y)
        self.cue_shown = (self.x == 0) & ~self.oracle_visited
        self.oracle_visited |= self.cue_shown
        behind = self.x < self.elapsed - self.oracle_length
        return np.where(final, (self.y == self.goal).astype(np.float64), np.where(behind, self.penalty, 0.0))

    def _success(self) -> np.ndarray:
        return self.y == self.goal

    def _cell(self, i: int, x: int, y: int) -> str:
        if (x, y) == (self.x[i], self.y[i]):
            return "agent"
        if y != 0:
            return "goal" if y == self.goal[i] else "decoy"
        return "oracle" if x == 0 else "floor"

    def render_text(self, i: int) -> str:
        symbols = {"agent": "A", "goal": "G", "decoy": "x", "oracle": "O", "floor": "."}
        rows = []
        for y in (1, 0, -1):
            if y == 0:
                rows.append("".join(symbols[self._cell(i, x, 0)] for x in range(self.junction + 1)))
            else:
                rows.append(" " * self.junction + symbols[self._cell(i, self.junction, y)])
        goal = "up" if self.goal[i] > 0 else "down"
        return "\n".join(rows) + f"\nt={self.elapsed[i]}/{self.episode_length} goal={goal}"

    def render_rgb(self, i: int, cell: int = 8) -> np.ndarray:
        width = self.junction + 1
        image = np.empty((3, width, 3), dtype=np.uint8)
        image[:] = _CELL_COLOURS["wall"]
        for x in range(width):
            image[1, x] = _CELL_COLOURS[self._cell(i, x, 0)]
        for row, y in ((0, 1), (2, -1)):
            image[row, self.junction] = _CELL_COLOURS[self._cell(i, self.junction, y)]
        return np.repeat(np.repeat(image, cell, axis=0), cell, axis=1)


class PassiveTMaze(TMaze):
    """Passive T-Maze (Ni et al. 2023, ``TMazeClassicPassive``): the agent starts on the oracle.

    Horizon parameter ``length`` = corridor length L. The cue is in the first observation;
    the choice is the (L+1)-th action: memory distance L, episode length L+1. Pure memory,
    credit-assignment length 1. Optimal return 1, best memoryless return 0.5.
    """

    oracle_length = 0


class ActiveTMaze(TMaze):
    """Active T-Maze (Ni et al. 2023, ``TMazeClassicActive``): the oracle is one step behind the start.

    The agent must first step left to fetch the cue, then walk L + 1 cells to the junction
    and choose: memory distance L + 1, episode length L + 3. Tests memory together with
    exploration and credit assignment. Optimal return 1, best memoryless return 0.5.
    """

    oracle_length = 1

