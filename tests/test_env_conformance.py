"""An environment that breaks gymnasium's API (observations of another shape, the old four-tuple `step`, a `reset`
without info, `reset` or `step` raising) is refused in one line before a run directory exists; the Python API
refuses such an env, and a space no memory policy takes, with a `ConfigError` before SB3 sees it; a folder path
starting with `~`, which no shell expands there, is refused rather than made as a folder named `~`."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import train_rl
from agents import VMPO, MemoryPPO
from envs import make_vec_env
from envs.conformance import api_problem
from envs.rules import ConfigError

MODULE = textwrap.dedent('''
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces

    class Good(gym.Env):
        observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        action_space = spaces.Discrete(2)

        def _obs(self):
            return np.zeros(3, np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self._obs(), {}

        def step(self, action):
            self.t += 1
            return self._obs(), 0.0, self.t >= 5, False, {}

    class WrongShape(Good):
        def _obs(self):
            return np.zeros(5, np.float32)

    class ResetRaises(Good):
        def reset(self, *, seed=None, options=None):
            raise RuntimeError("no reset today")

    class ResetWithoutInfo(Good):
        def reset(self, *, seed=None, options=None):
            return self._obs()

    class FourTupleStep(Good):
        def step(self, action):
            return self._obs(), 0.0, True, {}

    class StepRaises(Good):
        def step(self, action):
            raise RuntimeError("no step today")

    class UnboundedActions(Good):
        action_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)

    class TupleObservations(Good):
        observation_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))

        def _obs(self):
            return (0, 0)
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "conformance_envs.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("conformance_envs", None)


@pytest.mark.parametrize(("name", "expected"), [
    ("WrongShape", "reset's observation has shape (5,), its space (3,)"),
    ("ResetRaises", "reset raised RuntimeError: no reset today"),
    ("ResetWithoutInfo", "reset returned no (observation, info) pair"),
    ("FourTupleStep", "step returned 4 values"),
    ("StepRaises", "step raised RuntimeError: no step today"),
])
def test_an_env_that_breaks_the_api_is_refused_before_the_run_exists(user_module, tmp_path, capsys, name, expected):
    log_dir = tmp_path / "runs"
    code = train_rl.main(["--env", f"conformance_envs:{name}", "-n", "64", "--n-envs", "2", "--backbone", "mlp",
                          "--log-dir", str(log_dir)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"env='conformance_envs:{name}': breaks gymnasium's API: {expected}" in err, err
    assert not log_dir.exists()


def test_a_conforming_env_has_no_problem(user_module):
    import conformance_envs

    assert api_problem(conformance_envs.Good(), seed=0) is None


def test_dict_observations_are_checked_key_by_key() -> None:
    class DictEnv(gym.Env):
        observation_space = spaces.Dict({"a": spaces.Box(0, 1, (2,)), "b": spaces.Discrete(3)})
        action_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return {"a": np.zeros(2, np.float32)}, {}

    assert api_problem(DictEnv()) == "reset's observation is ['a'], the space's keys are ['a', 'b']"


@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
def test_the_python_api_refuses_a_space_no_memory_policy_takes(user_module, learner) -> None:
    import conformance_envs

    with pytest.raises(ConfigError, match=r"^env: its action space Box\(-inf, inf"):
        learner("MemoryPolicy", conformance_envs.UnboundedActions())
    with pytest.raises(ConfigError, match=r"^env: its action space Box\(-inf, inf"):
        learner("MemoryPolicy", make_vec_env("conformance_envs:UnboundedActions", 2, seed=0))
    with pytest.raises(ConfigError, match=r"^env: its observation space Tuple"):
        learner("MemoryPolicy", "conformance_envs:TupleObservations")


@pytest.mark.parametrize("learner", [MemoryPPO, VMPO])
@pytest.mark.parametrize("given", ["id", "object"])
def test_the_python_api_refuses_an_env_that_breaks_the_api(user_module, learner, given) -> None:
    import conformance_envs

    env, named = (("conformance_envs:FourTupleStep", "env='conformance_envs:FourTupleStep'") if given == "id" else
                  (conformance_envs.FourTupleStep(), "env"))
    with pytest.raises(ConfigError, match=rf"^{named}: breaks gymnasium's API: step returned 4 values"):
        learner("MemoryPolicy", env, seed=0)


@pytest.mark.parametrize("path", ["~/runs", "~user/runs", "~"])
def test_a_folder_starting_with_a_tilde_is_refused_not_made(tmp_path, monkeypatch, capsys, path) -> None:
    monkeypatch.chdir(tmp_path)
    code = train_rl.main(["-n", "64", "--log-dir", path])
    err = capsys.readouterr().err
    assert code == 2 and f"log_dir='{path}': '~' is not expanded here" in err, err
    assert not (Path(tmp_path) / "~").exists() and not any(tmp_path.iterdir())
