"""What a MiniGrid agent does, step by step: the position, heading and action of a few episodes of saved
models (final models or checkpoints), to see what went wrong in an evaluation that dipped.

Each step is written ``x,y/d:a``: the agent at column ``x``, row ``y``, facing ``d`` (0 east, 1 south,
2 west, 3 north) takes action ``a`` (0 turn left, 1 turn right, 2 forward). An episode that ends is
followed by ``END r=<reward>``; one still running after ``--steps`` steps by ``…``.

Usage::

    .venv/bin/python notebooks/minigrid_trace.py --name trace RUN/checkpoints/model_500000_steps.zip ...
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import RESULTS, heading, machine_info, machine_line, provenance, write_results

from agents import ALGOS
from envs.registry import make_vec_env
from experiments.studies.runs import Run


def trace(model_path: Path, seed: int, steps: int, deterministic: bool) -> dict[str, Any]:
    """One episode of the model saved at ``model_path`` (its run's config gives the env), env seed ``seed``."""
    run = Run(model_path.parent.parent if model_path.parent.name == "checkpoints" else model_path.parent)
    config = run.config
    model = ALGOS[config["algo"]].load(model_path, device="cpu")
    env = make_vec_env(config["env"], 1, seed, **config.get("env_kwargs", {}))
    observations = env.reset()
    state, episode_start, moves, end = None, np.ones(1, dtype=bool), [], None
    for _ in range(steps):
        actions, state = model.predict(observations, state=state, episode_start=episode_start,
                                       deterministic=deterministic)
        x, y = env.get_attr("agent_pos")[0]
        moves.append(f"{x},{y}/{env.get_attr('agent_dir')[0]}:{int(actions[0])}")
        observations, rewards, episode_start, _ = env.step(actions)
        if episode_start[0]:
            end = float(rewards[0])
            break
    env.close()
    return {"model": str(model_path), "moves": moves, "reward": end}


def render(result: dict[str, Any]) -> str:
    policy = "deterministic" if result["deterministic"] else "stochastic"
    lines = [*heading("MiniGrid episodes step by step", result), machine_line(result), "",
             f"One episode per model and env seed, {policy} policy; each step `x,y/heading:action` "
             "(heading 0 east, 1 south, 2 west, 3 north; action 0 left, 1 right, 2 forward).", ""]
    for episode in result["episodes"]:
        ending = "…" if episode["reward"] is None else f"END r={episode['reward']:.2f}"
        lines += [f"- `{episode['model']}`, env seed {episode['seed']}, {len(episode['moves'])} steps:",
                  f"  {' '.join(episode['moves'])} {ending}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path, help="model.zip files of MiniGrid runs (or their checkpoints)")
    parser.add_argument("--name", required=True, help="results file name (benchmarks/results/<name>.{json,md})")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory of the results files")
    parser.add_argument("--seeds", type=int, nargs="+", default=[7], help="env seeds, one episode each")
    parser.add_argument("--steps", type=int, default=40, help="steps shown per episode at most")
    parser.add_argument("--deterministic", action="store_true", help="the most probable action (default: sample)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    episodes = [{**trace(path, seed, args.steps, args.deterministic), "seed": seed}
                for path in args.models for seed in args.seeds]
    result = {**provenance(), "machine": machine_info(), "deterministic": args.deterministic, "episodes": episodes}
    write_results(args.name, result, render, args.out)


if __name__ == "__main__":
    main()
