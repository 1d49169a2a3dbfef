"""How much memory a run will hold, estimated before anything is allocated, and whether it fits.

The estimate counts what grows with the settings:

- the rollout buffer (SB3's `RolloutBuffer`: observations, actions and six float32 scalars per
  step, `n_steps · n_envs` steps);
- the memory windows (`agents.buffer`): per backbone, the history of `M + n_steps` records
  per env, and the live windows of the training and evaluation envs;
- the model: parameters, gradients and Adam's two moments (4 float32 copies);
- the environments: a fixed size per copy (numpy-batched engram copies are small, gymnasium envs
  are Python objects).

It leaves out the activations of an update and fixed costs (the interpreter, torch), so a run it
accepts may still need a few hundred MB more; what it refuses could never fit.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from gymnasium import spaces
from stable_baselines3.common.preprocessing import get_action_dim, get_obs_shape
from torch import Tensor

from envs.rules import ConfigError
from experiments.config import RunConfig, algo_defaults

FLOAT = 4
"""bytes of a float32"""
ENV_COPY_BYTES = {"engram": 1 << 10, "gymnasium": 256 << 10}
"""an upper estimate of one environment copy: an engram copy is a row of numpy arrays; a gymnasium env
(MiniGrid, POPGym) a Python object with its own grid or state"""
SCALARS_PER_STEP = 6
"""rewards, returns, episode starts, values, log-probabilities, advantages"""


@dataclass(frozen=True)
class Footprint:
    """Estimated bytes per part of a run, and where each part lives (`cpu` or the accelerator)."""

    parts: dict[str, int]
    accelerator: frozenset[str] = frozenset()
    """parts that live on the accelerator when the run uses one"""

    def on(self, accelerator: bool) -> dict[str, int]:
        """The parts in host memory (`accelerator` False) or on the accelerator (True)."""
        return {name: size for name, size in self.parts.items() if (name in self.accelerator) == accelerator}


def _obs_floats(space: spaces.Space) -> int:
    if isinstance(space, spaces.Dict):
        return sum(_obs_floats(sub) for sub in space.spaces.values())
    return math.prod(get_obs_shape(space))  # type: ignore[arg-type]


def estimate(config: RunConfig, observation_space: spaces.Space, action_space: spaces.Space, policy: torch.nn.Module,
             env_family: str) -> Footprint:
    """The footprint of `config` for a policy built on the meta device (no storage)."""
    n_steps = _n_steps(config)
    steps = n_steps * config.n_envs
    buffer = steps * FLOAT * (_obs_floats(observation_space) + get_action_dim(action_space) + SCALARS_PER_STEP)
    windows = 0
    for state in policy.initial_state(1).backbones().values():  # two when the critic has a backbone of its own
        for name, tensor in ((name, t) for name, t in state._asdict().items() if isinstance(t, Tensor)):
            per_step = math.prod(tensor.shape[2:]) * tensor.element_size()
            length = tensor.shape[1] if tensor.dim() > 1 else 1
            history = (length + n_steps) * config.n_envs if name in ("memory", "valid") else 0
            windows += per_step * (history + length * (config.n_envs + config.n_eval_envs))
    model = 4 * FLOAT * sum(p.numel() for p in policy.parameters())
    copies = ENV_COPY_BYTES["engram" if env_family == "engram" else "gymnasium"]
    envs = copies * (config.n_envs + config.n_eval_envs)
    return Footprint({"rollout buffer": buffer, "memory windows": windows, "model": model, "environments": envs},
                     accelerator=frozenset({"memory windows", "model"}))


def check_copies_fit(flag: str, n_copies: int, policy: torch.nn.Module, observation_space: spaces.Space,
                     env_family: str, host: int | None = None) -> None:
    """Refuse `n_copies` env copies played by `policy` (an evaluation) whose memory windows, observations and
    envs exceed the available host memory: `ConfigError` naming `flag`, the value and the sizes."""
    window = sum(t.numel() * t.element_size() for state in policy.initial_state(1).backbones().values()
                 for t in state._asdict().values() if isinstance(t, Tensor))
    per_copy = window + FLOAT * _obs_floats(observation_space) + ENV_COPY_BYTES[
        "engram" if env_family == "engram" else "gymnasium"]
    available = available_host_memory() if host is None else host
    if n_copies * per_copy > available:
        raise ConfigError(f"{flag}={n_copies}: {n_copies:,} env copies would need about {human(n_copies * per_copy)}"
                          f" of RAM ({human(per_copy)} each) but {human(available)} is available; expected fewer")


def _n_steps(config: RunConfig) -> int:
    return config.algo_options().get("n_steps", algo_defaults(config.algo)["n_steps"])


def available_host_memory() -> int:
    """Bytes of RAM available to a new allocation (`MemAvailable`; free pages where there is no /proc)."""
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def uses_accelerator(device: str) -> bool:
    """Whether a run on `device` keeps its model and memory windows on a CUDA device."""
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())


def human(size: float) -> str:
    """`1536` → `1.5 KiB`."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    power = 0
    while size >= 1024 and power < len(units) - 1:
        size, power = size / 1024, power + 1
    return f"{size:.0f} B" if power == 0 else f"{size:.1f} {units[power]}"


def check_fits(config: RunConfig, footprint: Footprint, host: int | None = None,
               accelerator: int | None = None) -> None:
    """Refuse a run whose footprint exceeds the available host memory (or, for its model and windows,
    the free memory of its CUDA device): `ConfigError` naming the settings and the sizes."""
    on_gpu = uses_accelerator(config.device)
    places = [("RAM", footprint.on(False) if on_gpu else footprint.parts,
               available_host_memory() if host is None else host)]
    if on_gpu:
        if accelerator is None:
            device = torch.device(config.device if config.device != "auto" else "cuda")
            accelerator = torch.cuda.mem_get_info(device)[0]
        places.append(("GPU memory", footprint.on(True), accelerator))
    for place, parts, available in places:
        need = sum(parts.values())
        if need > available:
            detail = ", ".join(f"{name} {human(size)}" for name, size in sorted(parts.items(), key=lambda p: -p[1]))
            raise ConfigError(
                f"{config.algo}.n_steps={_n_steps(config)}, "
                f"n_envs={config.n_envs}, n_eval_envs={config.n_eval_envs}, {config.backbone} options "
                f"{config.backbone_options() or '(defaults)'}: the run would need about {human(need)} of {place} "
                f"({detail}) but {human(available)} is available; lower n_steps, n_envs or the backbone's sizes")
