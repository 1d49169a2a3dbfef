"""Where the training time goes: cProfile of ``learn`` for one run configuration.

Trains the configuration for a few rollouts under :mod:`cProfile` and writes the functions that
take the most time of their own (``tottime``) and the phases (rollout collection, update, and
inside the update the backbone's forward and the backward pass) as shares of the total.

Usage::

    .venv/bin/python notebooks/profile_training.py --config configs/tmaze100.yaml
    .venv/bin/python notebooks/profile_training.py --config configs/tmaze100.yaml -p ppo.segment_length=1 \
        --name profile_t1
    .venv/bin/python notebooks/profile_training.py -p env=popgym-RepeatPreviousEasy-v0 --name profile_defaults
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from typing import Any

import torch
from common import heading, machine_info, machine_line, provenance, write_results

from experiments.config import build_config, plain
from experiments.training import build_model, make_envs

PHASES = {
    "collect_rollouts": "rollout collection",
    "_latents_step": "policy step in the rollouts (features, backbone step)",
    "step_wait": "env steps (the VecEnv, adapters included)",
    "train": "update (train)",
    "segments": "minibatch gather (segments, shared windows)",
    "forward_outputs": "backbone forward in the update",
    "attend": "attention kernel (rollouts and update, forward)",
    "backward": "backward pass",
    "adam": "optimizer (Adam)",
}


def profile(config_file: str | None, overrides: list[str], steps: int, top: int) -> dict[str, Any]:
    config = build_config(config_file, {"total_timesteps": steps, "eval_freq": 0, "checkpoint_freq": 0}, overrides)
    env, _ = make_envs(config)
    model = build_model(config, env, tensorboard_log=None)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    model.learn(steps)
    profiler.disable()
    total = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    rows = []
    for (file, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{name} ({file.rsplit('/', 1)[-1]}:{line})", "name": name, "calls": calls,
                     "own_s": own, "cumulative_s": cumulative})
    phases = {}
    for name, label in PHASES.items():
        matching = [r["cumulative_s"] for r in rows if r["name"] == name]
        phases[label] = max(matching) / total if matching else 0.0
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    return {"config": plain(config.to_dict()), "steps": steps, "total_s": total, "phases": phases,
            "top": [{**r, "share": r["own_s"] / total} for r in rows[:top]]}


def render(result: dict[str, Any]) -> str:
    c = result["config"]
    lines = [*heading("Where the training time goes", result), machine_line(result), "",
             f"`{c['algo']}` + `{c['backbone']}` on `{c['env']}` {c['env_kwargs']}, {result['steps']:,} env steps, "
             f"{result['total_s']:.1f} s under cProfile (which slows Python-heavy code more than tensor code). Phases "
             "nest: each is the cumulative time of its function (the rollouts hold the policy step and the env "
             "steps, the update its gather, forward, backward and optimizer).", "",
             "| phase | share of the time |", "|---|---:|"]
    lines += [f"| {label} | {share:.0%} |" for label, share in result["phases"].items()]
    lines += ["", "Functions by their own time:", "", "| function | calls | own s | share |", "|---|---:|---:|---:|"]
    lines += [f"| `{r['function']}` | {r['calls']:,} | {r['own_s']:.2f} | {r['share']:.1%} |" for r in result["top"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="run configuration (configs/*.yaml); without it every default")
    parser.add_argument("-p", nargs="*", default=[], metavar="KEY=VALUE", help="overrides, as for train_rl.py")
    parser.add_argument("--steps", type=int, default=16_384, help="env steps to profile (one torch thread)")
    parser.add_argument("--top", type=int, default=15, help="functions listed")
    parser.add_argument("--name", default="profile_training", help="results file name")
    args = parser.parse_args()
    torch.set_num_threads(1)
    result: dict[str, Any] = {**provenance(), "machine": machine_info()}
    result.update(profile(args.config, args.p, args.steps, args.top))
    write_results(args.name, result, render)


if __name__ == "__main__":
    main()
