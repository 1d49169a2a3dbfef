"""Success by start position on MiniGrid-Memory: which starts does a trained agent solve?

The agent starts facing the split at x = 1 … S - 3 of the hallway row, and the cue object sits at x = 1,
one row up. How much it takes to see the cue depends on the start and the view (:func:`cue_sight`): in
MiniGrid-MemoryS9 with the 3×3 view the cue is in sight at the first step only from x = 1, from x = 2 and 3
after turning round, and from x = 4 … 6 only after walking back into the start room; with MiniGrid's
default 7×7 view on MemoryS11 turning round shows it from x = 2 … 7. A policy that uses the cue only when it
is cheap to see solves some starts and guesses (0.5) at the others, and one that never looks at it guesses
everywhere but at x = 1; this script tells which. For each run's final model it plays ``--episodes`` episodes
with the stochastic or the deterministic policy and reports, per start x, the success rate, the episodes and
their mean length.

Usage::

    .venv/bin/python notebooks/minigrid_starts.py --name minigrid_starts runs/s9/MiniGrid-MemoryS9-v0__ppo-gtrxl__0
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch
from common import heading, machine_info, machine_line, provenance, run_directories_parser, write_results

from agents import ALGOS
from envs.registry import make_vec_env
from experiments.studies.runs import Run, find_runs

N_ENVS = 8
SEED = 4242


def start_outcomes(run: Run, episodes: int, deterministic: bool) -> dict[int, dict[str, float]]:
    """Success rate, episodes and mean length per start x of ``run``'s final model."""
    config = run.config
    model = ALGOS[config["algo"]].load(run.directory / "model.zip", device="cpu")
    env = make_vec_env(config["env"], N_ENVS, SEED, **config.get("env_kwargs", {}))
    observations = env.reset()
    starts = [int(position[0]) for position in env.get_attr("agent_pos")]
    state, episode_start = None, np.ones(N_ENVS, dtype=bool)
    successes: dict[int, list[float]] = defaultdict(list)
    lengths: dict[int, list[int]] = defaultdict(list)
    while sum(map(len, successes.values())) < episodes:
        actions, state = model.predict(observations, state=state, episode_start=episode_start,
                                       deterministic=deterministic)
        observations, _, episode_start, infos = env.step(actions)
        positions = env.get_attr("agent_pos")
        for i in np.flatnonzero(episode_start):
            successes[starts[i]].append(float(infos[i]["is_success"]))
            lengths[starts[i]].append(int(infos[i]["episode"]["l"]))
            starts[i] = int(positions[i][0])  # the next episode's start (the env has reset)
    env.close()
    return {x: {"success": float(np.mean(successes[x])), "episodes": len(successes[x]),
                "mean_length": float(np.mean(lengths[x]))} for x in sorted(successes)}


def cue_sight(env_id: str, agent_view_size: int = 7) -> dict[int, str]:
    """Per start x, when the cue can first be in view: ``first step`` (facing the split, as every episode
    starts), ``turning round`` (facing the start room from the start) or ``walking back``."""
    import gymnasium as gym
    import minigrid  # noqa: F401  (registers the ids)

    env = gym.make(env_id, agent_view_size=agent_view_size).unwrapped
    env.reset(seed=0)
    cue = (1, env.height // 2 - 1)
    sight = {}
    for x in range(1, env.width - 2):
        env.agent_pos = np.array((x, env.height // 2))
        seen = []
        for direction in (0, 2):  # facing the split, then facing the start room
            env.agent_dir = direction
            where = env.relative_coords(*cue)
            seen.append(where is not None and bool(env.gen_obs_grid()[1][where[0], where[1]]))
        sight[x] = "first step" if seen[0] else "turning round" if seen[1] else "walking back"
    env.close()
    return sight


def render(result: dict[str, Any]) -> str:
    policy = "deterministic" if result["deterministic"] else "stochastic"
    xs = sorted({int(x) for run in result["runs"] for x in run["starts"]})
    lines = [*heading("MiniGrid-Memory: success by start position", result), machine_line(result), "",
             f"Final models, {result['episodes']} episodes each with the {policy} policy (env seed {SEED}). "
             "Per start x: success rate (mean episode length). Where the cue comes into view, per task and view:",
             "", *[f"- {setting}: " + "; ".join(f"x = {x}: {when}" for x, when in sight.items())
                   for setting, sight in result["sight"].items()], "",
             "| run | " + " | ".join(f"x = {x}" for x in xs) + " |", "|---|" + "---:|" * len(xs)]
    for run in result["runs"]:
        cells = [f"{run['starts'][str(x)]['success']:.2f} ({run['starts'][str(x)]['mean_length']:.0f})"
                 if str(x) in run["starts"] else "—" for x in xs]
        lines.append(f"| {run['run']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = run_directories_parser(__doc__, "run or study directories of MiniGrid-Memory runs")
    parser.add_argument("--episodes", type=int, default=600)
    parser.add_argument("--deterministic", action="store_true", help="the most probable action (default: sample)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = [run for directory in args.directories for run in find_runs(directory)]
    result = {**provenance(), "machine": machine_info(), "episodes": args.episodes,
              "deterministic": args.deterministic,
              "sight": {f"{env} with the {view}×{view} view": cue_sight(env, view) for env, view in
                        sorted({(run.config["env"], run.config.get("env_kwargs", {}).get("agent_view_size", 7))
                                for run in runs})},
              "runs": [{"run": f"{run.directory.parent.name}/{run.name}",
                        "starts": {str(x): outcome for x, outcome in
                                   start_outcomes(run, args.episodes, args.deterministic).items()}}
                       for run in runs]}
    write_results(args.name, result, render, args.out)


if __name__ == "__main__":
    main()
