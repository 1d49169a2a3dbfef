"""Helpers shared by the test modules: backbone lists and small options derived from the registry,
small learners on a short T-Maze, and a callback that records the gap of rollout equals training (the bytes autograd
saves for backward: :mod:`experiments.activation_bytes`).

Every test's SB3 logger writes under its own ``tmp_path``, never into the system temp directory.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback

from agents import ALGOS
from envs import make_vec_env
from lm.data import copy_task
from lm.workbench import build_lm_config
from policies import ATTENTIONS, BACKBONES, POSITIONS
from policies.attention.layer import MultiHeadAttention, make_attention
from policies.backbones.transformer_xl import WindowTransformer
from policies.lm.model import MemoryLanguageModel
from policies.window import attention_mask

TRANSFORMERS = [name for name, spec in BACKBONES.items() if issubclass(spec.cls, WindowTransformer)]
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


def attention_inputs(steps: int, d_model: int, memory_length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Float64 inputs of an attention for two envs: the segment ``h`` ``[2, T, D]``, the memory ``[2, M, D]``
    and the mask; env 0's episode began ``M − 2`` steps before the segment, env 1's window is full and a
    new episode starts at its fourth step."""
    torch.manual_seed(1)
    M = memory_length
    h, memory = torch.randn(2, steps, d_model, dtype=torch.float64), torch.randn(2, M, d_model, dtype=torch.float64)
    valid = torch.tensor([[False, False] + [True] * (M - 2), [True] * M])
    starts = torch.zeros(2, steps, dtype=torch.bool)
    starts[1, 3] = True
    return h, memory, attention_mask(valid, starts, M)


def inputs_seen_last(backbone: Any, x: torch.Tensor) -> list[int]:
    """The steps of one episode ``x`` ``[T, 1, input]`` (from a fresh state) whose input, moved by 3, changes the
    backbone's output at the last step: what an attention pattern lets that step see, and the step itself."""
    starts = torch.zeros(x.shape[:2], dtype=torch.bool)
    starts[0] = True

    def last_output(inputs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return backbone.forward_sequence(inputs, backbone.initial_state(1), starts)[0][-1]

    base = last_output(x)
    moved = []
    for j in range(x.shape[0]):
        perturbed = x.clone()
        perturbed[j] += 3.0
        if not torch.allclose(last_output(perturbed), base, atol=1e-6):
            moved.append(j)
    return moved


def tiny_copy_lm(tmp_path: Any) -> tuple[Any, Any, Any]:
    """An untrained one-layer TrXL language model on a copy stream of 2,000 tokens over 8 symbols, read in
    segments of 4 rows × 8 tokens: its workbench config, the model and the stream."""
    config = build_lm_config(None, ["data=copy", "backbone=trxl", f"log_dir={tmp_path}", "segment_length=8",
                                    "batch_size=4", "copy_vocab=8", "copy_tokens=2000", "d_embed=16",
                                    "backbone_options.d_model=16", "backbone_options.n_heads=2",
                                    "backbone_options.n_layers=1", "backbone_options.memory_length=8"])
    torch.manual_seed(0)
    model = MemoryLanguageModel(8, backbone="trxl", d_embed=16, **config.backbone_options)
    return config, model, copy_task(2000, vocab_size=8, distance=config.copy_distance, seed=1)


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


def pytest_configure(config: pytest.Config) -> None:
    """A worker of ``pytest -n N`` (pytest-xdist) shares the cores with the others: it and the commands it
    starts compute with one torch thread each, as every job on a shared machine should (docs/notes/threads.md)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


def build_attention(name: str, d_model: int, n_heads: int, d_head: int, *, max_distance: int, dropout: float = 0.0,
              position: str | None = None, **options: Any) -> MultiHeadAttention:
    """:func:`policies.attention.layer.make_attention` with the attention's options as keywords; a position
    scheme's name as ``name`` is the full window with that position (and the options are the position's)."""
    if name in POSITIONS and name not in ATTENTIONS:
        return make_attention("full", d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout,
                              position=name, position_options=options or None)
    return make_attention(name, d_model, n_heads, d_head, max_distance=max_distance, dropout=dropout,
                          options=options or None, position=position)


def segment_with_a_start(attn: MultiHeadAttention, env: int, step: int, *, envs: int, steps: int, d_model: int,
                         memory_length: int) -> tuple[torch.Tensor, ...]:
    """A float64 segment ``[envs, steps, d_model]``, a full memory, the mask with one episode start (env ``env``,
    step ``step``), and the attention's queries, keys and values over ``[memory; segment]`` (for naive references)."""
    h = torch.randn(envs, steps, d_model, dtype=torch.float64)
    memory = torch.randn(envs, memory_length, d_model, dtype=torch.float64)
    starts = torch.zeros(envs, steps, dtype=torch.bool)
    starts[env, step] = True
    mask = attention_mask(torch.ones(envs, memory_length, dtype=torch.bool), starts, memory_length)
    return h, memory, mask, attn.segment_qkv(h, attn.keys_values(memory))
