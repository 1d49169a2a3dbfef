"""What a trained T-Maze agent does at the junction, split by the cue it was shown.

For every T-Maze run directory (passive ``TMaze-v0``), the final ``model.zip`` walks the corridor
of fresh episodes with deterministic actions; at the junction (step ``L``) it records the policy's
probabilities of the four actions (right, up, left, down), averaged over the episodes whose cue
said "up" (+1) and those whose cue said "down" (-1). A memoryless policy gives the same row for
both cues; a policy that remembers but has lost an action gives different rows, one of them not
the goal's. The junction's "right" is a no-op: it scores like the wrong goal.

Usage::

    .venv/bin/python notebooks/tmaze_junction.py --name tmaze_junction runs/tmaze_scaling_L40 runs/tmaze_scaling_L60
"""

from __future__ import annotations

from typing import Any

import torch
from common import heading, machine_info, machine_line, provenance, run_directories_parser, write_results

from agents import ALGOS
from envs import make_vec_env
from experiments.studies.runs import Run, find_runs
from policies.policy import MemoryActorCriticPolicy

ACTIONS = ("right", "up", "left", "down")


def junction_probabilities(policy: MemoryActorCriticPolicy, length: int, episodes: int, seed: int) -> dict[str, list]:
    """Mean action probabilities at the junction for each cue, over ``episodes`` fresh episodes."""
    venv = make_vec_env("TMaze-v0", n_envs=episodes, seed=seed, length=length)
    obs = venv.reset()
    cue = obs[:, 1].copy()
    state = policy.initial_state(episodes)
    starts = torch.ones(episodes, dtype=torch.bool)
    with torch.inference_mode():
        for t in range(length + 1):
            distribution, state = policy.get_distribution(torch.as_tensor(obs), state, starts)
            if t == length:
                probs = distribution.distribution.probs.numpy()
                return {f"cue {c:+d}": probs[cue == c].mean(axis=0).round(4).tolist() for c in (1, -1)}
            obs, _, dones, _ = venv.step(distribution.get_actions(deterministic=True).numpy())
            starts = torch.as_tensor(dones)
    raise AssertionError("unreachable: the loop returns at the junction")


def analyse(run: Run, episodes: int, seed: int) -> dict[str, Any]:
    length = int(run.config["env_kwargs"]["length"])
    model = ALGOS[run.config["algo"]].load(run.directory / "model.zip", device="cpu")
    return {"run": f"{run.directory.parent.name}/{run.directory.name}", "length": length,
            "backbone": run.config["backbone"], "final_success": run.score(success=True),
            "junction": junction_probabilities(model.policy, length, episodes, seed)}


def render(result: dict[str, Any]) -> str:
    lines = [*heading("T-Maze: action probabilities at the junction, by cue", result), machine_line(result), "",
             f"{result['episodes']} fresh episodes per run (env seed {result['seed']}), deterministic actions "
             "along the corridor, the policy's probabilities at the junction averaged per cue. Cue +1: the "
             "goal is up; cue -1: the goal is down.", "",
             "| run | L | final success | cue | P(right) | P(up) | P(left) | P(down) |",
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    for row in result["rows"]:
        for cue, probs in row["junction"].items():
            success = "—" if row["final_success"] is None else f"{row['final_success']:.2f}"
            lines.append(f"| {row['run']} | {row['length']} | {success} | {cue} | "
                         + " | ".join(f"{p:.3f}" for p in probs) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = run_directories_parser(__doc__, "study or run directories of TMaze-v0 runs")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--seed", type=int, default=123)
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = [run for directory in args.directories for run in find_runs(directory)
            if run.config.get("env") == "TMaze-v0" and (run.directory / "model.zip").exists()]
    if not runs:
        parser.error(f"no finished TMaze-v0 runs (with model.zip) under {[str(d) for d in args.directories]}")
    result = {**provenance(), "machine": machine_info(), "episodes": args.episodes, "seed": args.seed,
              "actions": list(ACTIONS), "rows": [analyse(run, args.episodes, args.seed) for run in runs]}
    write_results(args.name, result, render, args.out)


if __name__ == "__main__":
    main()
