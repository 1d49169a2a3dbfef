"""Helpers shared by the test modules: backbone lists and small options derived from the registry,
small learners on a short T-Maze, and a callback that records invariant 3's gap (the bytes autograd
saves for backward: :mod:`experiments.activation_memory`).

Every test's SB3 logger writes under its own ``tmp_path``, never into the system temp directory.
"""

from __future__ import annotations

from typing import Any

import pytest
from stable_baselines3.common.callbacks import BaseCallback

from agents import ALGOS
from envs import make_vec_env
from policies import BACKBONES
from policies.memory_transformer import MemoryTransformer

TRANSFORMERS = [name for name, spec in BACKBONES.items() if issubclass(spec.cls, MemoryTransformer)]
"""the backbones with attention over a memory of per-depth inputs"""
GATED = [name for name, spec in BACKBONES.items() if "gate" in spec.options()]
"""the backbones whose gate is an option"""
ONE_PER_CLASS = list({spec.cls: name for name, spec in BACKBONES.items()}.values())
"""one backbone of every class in the registry"""
LEARNER_SIZES = {"d_model": 16, "n_heads": 2, "memory_length": 6, "max_steps": 3, "hidden_size": 16, "k": 3}
"""small sizes for learner tests (every backbone takes those of its options)"""


def small_options(backbone: str, **sizes: Any) -> dict[str, Any]:
    """The entries of ``sizes`` that ``backbone`` takes as options."""
    valid = BACKBONES[backbone].options()
    return {name: value for name, value in sizes.items() if name in valid}


def tmaze(n_envs: int = 4, seed: int = 0, length: int = 3) -> Any:
    """Episodes of length + 1 steps: several end inside every rollout."""
    return make_vec_env("TMaze-v0", n_envs=n_envs, seed=seed, length=length)


def small_model(backbone: str, env: Any = None, algo: str = "ppo", backbone_options: dict[str, Any] | None = None,
                **kwargs: Any) -> Any:
    """A learner with a small backbone (plus ``backbone_options``) and short rollouts on :func:`tmaze` (or ``env``)."""
    options = {"n_steps": 16, "batch_size": 32, "n_epochs": 2, "segment_length": 4, "seed": 0, **kwargs}
    backbone_kwargs = {**small_options(backbone, **LEARNER_SIZES), **(backbone_options or {})}
    return ALGOS[algo]("MemoryPolicy", env if env is not None else tmaze(),
                       policy_kwargs={"backbone": backbone, "backbone_kwargs": backbone_kwargs}, **options)


class LogpGaps(BaseCallback):
    """Collects ``train/rollout_logp_gap`` of every update (logged before the next rollout's dump)."""

    def __init__(self) -> None:
        super().__init__()
        self.gaps: list[float] = []

    def _on_rollout_start(self) -> None:
        if "train/rollout_logp_gap" in self.logger.name_to_value:
            self.gaps.append(self.logger.name_to_value["train/rollout_logp_gap"])

    def _on_step(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def sb3_logs_in_tmp_path(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """SB3 puts the logger of a model without ``tensorboard_log`` in ``$SB3_LOGDIR``, else in a new
    ``SB3-<time>`` folder of the system temp directory: point it at the test's ``tmp_path``."""
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path / "sb3_logs"))


SLOW_TIMEOUT = 4 * 3600
"""seconds a ``slow`` test may run: the 600 s of setup.cfg is for CI's tests; a slow learning test trains
up to ten seeds one after another (a 2-core machine with other work on it took over 600 s for five)"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))
