"""Proof that each task needs memory: a scripted oracle with memory is optimal, the best memoryless policy is not.

The oracles are windowed: at step t they see the last ``window`` observations of the
episode (all of them when ``window`` is None). Every engram task has a fixed horizon, so
all copies of a batched env run their episodes in lockstep and a window is a slice of one
``(time, copies, obs_dim)`` array. A window of ``memory_distance + 1`` observations must be
enough for an optimal return and ``memory_distance`` must not be: that measures the
memory distance the docstrings state.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

import envs
from envs.tmaze import DOWN, LEFT, RIGHT, UP

Policy = Callable[[np.ndarray, int], np.ndarray]  # (window (w, n, d), step index t) -> actions (n,)


def tmaze_oracle(task: envs.TMaze) -> Policy:
    def act(window: np.ndarray, t: int) -> np.ndarray:
        on_corridor = window[:, :, 0] == 0
        cue = (window[:, :, 1] * on_corridor).sum(axis=0)  # +-1 if the cue is in the window, else 0
        at_junction = (window[-1, :, 0] == 1) & (window[-1, :, 1] == 0)
        fetch = t < task.oracle_length
        return np.where(fetch, LEFT, np.where(at_junction, np.where(cue < 0, DOWN, UP), RIGHT))

    return act


def repeat_first_oracle(task: envs.RepeatFirst) -> Policy:
    def act(window: np.ndarray, t: int) -> np.ndarray:
        first = window[:, :, task.n_symbols] == 1  # the first-step flag
        symbols = window[:, :, : task.n_symbols].argmax(axis=2)
        return (symbols * first).sum(axis=0)  # symbol 0 when the first step has left the window

    return act


def repeat_previous_oracle(task: envs.RepeatPrevious) -> Policy:
    def act(window: np.ndarray, t: int) -> np.ndarray:
        if window.shape[0] <= task.k:
            return np.zeros(window.shape[1], dtype=np.int64)
        return window[-1 - task.k].argmax(axis=1)

    return act


def count_recall_oracle(task: envs.CountRecall) -> Policy:
    m = task.n_symbols

    def act(window: np.ndarray, t: int) -> np.ndarray:
        count = (window[:, :, :m] * window[-1, :, m:]).sum(axis=(0, 2))
        return np.minimum(count, task.max_count).astype(np.int64)

    return act


def memory_chain_oracle(task: envs.MemoryChain) -> Policy:
    b = task.num_bits

    def act(window: np.ndarray, t: int) -> np.ndarray:
        first = (window[:, :, 0] == 1)[:, :, None]  # time-to-live 1 marks the context step
        context = (window[:, :, 1 + b :] * first).sum(axis=0)  # +-1 per bit, 0 if not in the window
        query = window[-1, :, 1 : 1 + b].argmax(axis=1)
        return (context[np.arange(window.shape[1]), query] > 0).astype(np.int64)

    return act


ORACLES: dict[str, Callable[..., Policy]] = {
    "TMaze-v0": tmaze_oracle,
    "TMazeActive-v0": tmaze_oracle,
    "RepeatFirst-v0": repeat_first_oracle,
    "RepeatPrevious-v0": repeat_previous_oracle,
    "CountRecall-v0": count_recall_oracle,
    "MemoryChain-v0": memory_chain_oracle,
}

# Horizon parameter -> (episode length, memory distance), as documented.
DOCUMENTED: dict[str, tuple[str, Callable[[int], tuple[int, int]]]] = {
    "TMaze-v0": ("length", lambda L: (L + 1, L)),
    "TMazeActive-v0": ("length", lambda L: (L + 3, L + 1)),
    "RepeatFirst-v0": ("length", lambda T: (T, T - 1)),
    "RepeatPrevious-v0": ("k", lambda k: (4 * k, k)),
    "CountRecall-v0": ("length", lambda T: (T, T - 1)),
    "MemoryChain-v0": ("length", lambda L: (L + 1, L)),
}
HORIZONS = [1, 2, 7, 40]


def test_every_engram_id_has_an_oracle() -> None:
    assert set(ORACLES) == set(DOCUMENTED) == set(envs.ENV_IDS)


def run_episode(env_id: str, n: int, seed: int, policy_for: Callable[..., Policy], window: int | None = None,
                **kwargs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One lockstep episode in every copy; returns (returns, successes, observations (T + 1, n, d))."""
    venv = envs.make_vec_env(env_id, n, seed=seed, **kwargs).venv
    task = venv.task
    policy = policy_for(task)
    history = np.zeros((task.episode_length + 1, n, task.observation_space.shape[0]), dtype=np.float32)
    history[0] = venv.reset()
    returns = np.zeros(n)
    for t in range(task.episode_length):
        start = 0 if window is None else max(0, t + 1 - window)
        obs, rewards, dones, infos = venv.step(policy(history[start : t + 1], t))
        returns += rewards
        assert dones.all() == (t == task.episode_length - 1), "episodes must last episode_length steps"
        history[t + 1] = obs
    successes = np.array([info["is_success"] for info in infos])
    return returns, successes, history


def _horizon_kwargs(env_id: str, horizon: int) -> dict[str, int]:
    name, _ = DOCUMENTED[env_id]
    minimum = {"length": 2 if env_id in ("RepeatFirst-v0", "CountRecall-v0") else 1, "k": 1}[name]
    return {name: max(horizon, minimum)}


@pytest.mark.parametrize("horizon", HORIZONS)
@pytest.mark.parametrize("env_id", list(ORACLES))
def test_horizon_sets_episode_length_and_memory_distance(env_id: str, horizon: int) -> None:
    kwargs = _horizon_kwargs(env_id, horizon)
    task = envs.ENV_IDS[env_id](1, **kwargs)
    expected_length, expected_distance = DOCUMENTED[env_id][1](next(iter(kwargs.values())))
    assert (task.episode_length, task.memory_distance) == (expected_length, expected_distance)

    returns, successes, _ = run_episode(env_id, 64, 1, ORACLES[env_id], window=expected_distance + 1, **kwargs)
    np.testing.assert_allclose(returns, task.optimal_return, atol=1e-5)
    assert successes.all()
    returns, successes, _ = run_episode(env_id, 64, 1, ORACLES[env_id], window=expected_distance, **kwargs)
    assert returns.mean() < task.optimal_return - 1e-3 and not successes.all(), "a shorter window must not suffice"


@pytest.mark.parametrize(("env_id", "kwargs"), [
    ("TMaze-v0", {"length": 1000}),
    ("TMazeActive-v0", {"length": 250}),
    ("RepeatPrevious-v0", {"k": 64, "length": 155}),
    ("RepeatFirst-v0", {"length": 415}),
    ("CountRecall-v0", {"length": 207, "n_symbols": 13}),
    ("MemoryChain-v0", {"length": 100, "num_bits": 3}),
])
def test_oracle_is_optimal_at_long_horizons(env_id: str, kwargs: dict[str, int]) -> None:
    task = envs.ENV_IDS[env_id](1, **kwargs)
    returns, successes, _ = run_episode(env_id, 16, 2, ORACLES[env_id], **kwargs)
    np.testing.assert_allclose(returns, task.optimal_return, atol=1e-4)
    assert successes.all()


# ---- best memoryless policies ------------------------------------------------------------------

@pytest.mark.parametrize("env_id", ["TMaze-v0", "TMazeActive-v0"])
def test_tmaze_best_memoryless_policy_is_chance_exactly(env_id: str) -> None:
    """All 4**6 deterministic memoryless policies (observation -> action tables), each run once per goal.

    The dynamics are deterministic given the goal, so one copy per (table, goal) is an exact evaluation.
    """
    observations = [(a, b) for a in (0.0, 1.0) for b in (-1.0, 0.0, 1.0)]
    tables = np.array(list(itertools.product(range(4), repeat=len(observations))))  # (4096, 6)
    venv = envs.make_vec_env(env_id, 2 * len(tables), seed=3, length=4).venv
    venv.reset()
    venv.task.goal[:] = np.repeat([-1, 1], len(tables))  # copy j: table j % 4096, goal down then up
    obs = venv.task.observe()
    table_of_copy = np.tile(np.arange(len(tables)), 2)
    returns = np.zeros(venv.num_envs)
    for _ in range(venv.task.episode_length):
        obs_index = (obs[:, 0] * 3 + obs[:, 1] + 1).astype(np.int64)
        obs, rewards, dones, _ = venv.step(tables[table_of_copy, obs_index])
        returns += rewards
    assert dones.all()
    values = returns.reshape(2, len(tables)).mean(axis=0)
    assert values.max() == pytest.approx(venv.task.memoryless_return, abs=1e-6)
    assert values.max() == pytest.approx(0.5, abs=1e-6)


SCORED_KWARGS: dict[str, dict[str, int]] = {
    "RepeatFirst-v0": {"length": 12},
    "RepeatPrevious-v0": {"k": 3, "length": 12},
    "CountRecall-v0": {"length": 12, "n_symbols": 3},
    "MemoryChain-v0": {"length": 6, "num_bits": 2},
}


@pytest.mark.parametrize("env_id", list(SCORED_KWARGS))
def test_scored_tasks_best_memoryless_policy_stays_at_chance(env_id: str) -> None:
    """Actions do not change what is observed, so the best memoryless policy answers, per observation,
    the answer most often correct for it (read off the oracle). Fit on one seed, evaluate on another."""
    kwargs = SCORED_KWARGS[env_id]
    task = envs.ENV_IDS[env_id](1, **kwargs)
    n = 3000
    _, _, train_obs = run_episode(env_id, n, 4, ORACLES[env_id], **kwargs)
    oracle = ORACLES[env_id](envs.ENV_IDS[env_id](n, **kwargs))
    answers = np.stack([oracle(train_obs[: t + 1], t) for t in range(task.episode_length)])  # (T, n)
    votes: dict[bytes, np.ndarray] = {}
    for observation, answer in zip(train_obs[:-1].reshape(-1, train_obs.shape[-1]), answers.ravel(), strict=True):
        votes.setdefault(observation.tobytes(), np.zeros(task.action_space.n))[answer] += 1
    table = {key: int(count.argmax()) for key, count in votes.items()}

    def memoryless(_: envs.ScoredAnswerTask) -> Policy:
        return lambda window, t: np.array([table.get(o.tobytes(), 0) for o in window[-1]])

    returns, successes, _ = run_episode(env_id, n, 5, memoryless, **kwargs)
    tolerance = 4 * returns.std() / np.sqrt(n) + 1e-3
    assert returns.mean() == pytest.approx(task.memoryless_return, abs=tolerance)
    assert returns.mean() < task.optimal_return - 0.3
    assert successes.mean() < 0.6


@pytest.mark.parametrize(("length", "n_symbols", "max_count"), [(4, 4, 2), (6, 2, 1), (5, 3, None)])
def test_count_recall_memoryless_return_matches_a_direct_computation(length: int, n_symbols: int,
                                                                     max_count: int | None) -> None:
    """The mixture-of-binomials formula against enumerating every symbol sequence of a short episode."""
    task = envs.CountRecall(1, length=length, n_symbols=n_symbols, max_count=max_count)
    accuracy = 0.0
    for match, p_match in ((0, 1 - 1 / n_symbols), (1, 1 / n_symbols)):  # dealt symbol = queried one?
        tallies = np.zeros(task.max_count + 1)
        for t in range(length):
            for earlier in itertools.product(range(n_symbols), repeat=t):  # dealt before step t; query = 0
                count = min(sum(s == 0 for s in earlier) + match, task.max_count)
                tallies[count] += float(n_symbols) ** -t / length
        accuracy += p_match * tallies.max()
    assert task.memoryless_return == pytest.approx(2 * accuracy - 1)
