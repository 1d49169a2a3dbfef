"""Deterministic against stochastic evaluation of saved checkpoints: is a dip in a run's evaluations
a dip of the policy it learned, or of taking that policy's most probable action?

For each run directory and each of its checkpoints, it evaluates the deterministic policy (the
most probable action, the runs' score) and the stochastic one (sampled actions, as in training)
on the same ``--episodes`` fresh episodes (one env seed for both), and reports their success rates
and mean episode lengths. An episode that runs to the time limit without success is the mark of
a policy that loops. Per run: the lowest evaluation after the first one at the threshold, for
each policy, and every checkpoint where the two differ by more than ``--gap``.

Usage::

    .venv/bin/python notebooks/evaluation_modes.py --name evaluation_modes_minigrid runs/study_memory \\
        --backbone gtrxl --episodes 64
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from common import heading, machine_info, machine_line, provenance, run_directories_parser, write_results

from agents import ALGOS
from envs.registry import make_vec_env
from experiments.evaluation import evaluate
from experiments.run_dir import checkpoints
from experiments.studies.runs import Run, find_runs, lowest_after_reaching, task_label
from experiments.training import EVAL_SEED_OFFSET

EPISODE_SEED_OFFSET = 1
"""the episodes differ from those the run evaluated on during training"""


def evaluate_checkpoint(run: Run, path: Path, episodes: int) -> dict[str, float]:
    config = run.config
    model = ALGOS[config["algo"]].load(path, device="cpu")
    seed = int(config["seed"]) + EVAL_SEED_OFFSET + EPISODE_SEED_OFFSET
    row = {}
    for mode in ("deterministic", "stochastic"):
        env = make_vec_env(config["env"], int(config.get("n_eval_envs", 4)), seed, **config.get("env_kwargs", {}))
        result = evaluate(model, env, episodes, deterministic=mode == "deterministic")
        env.close()
        row[f"{mode}_success"] = result.success_rate
        row[f"{mode}_length"] = float(result.lengths.mean())
    return row


def study_run(run: Run, episodes: int, threshold: float, gap: float) -> dict[str, Any]:
    rows = [{"steps": steps, **evaluate_checkpoint(run, path, episodes)}
            for path, steps in checkpoints(run.directory / "checkpoints")]
    return {
        "run": run.name, "task": task_label(run.config), "seed": int(run.config["seed"]),
        "checkpoints": rows,
        "lowest_after_solving": {mode: lowest_after_reaching([r[f"{mode}_success"] for r in rows], threshold)
                                 for mode in ("deterministic", "stochastic")},
        "disagreements": [r for r in rows if abs(r["deterministic_success"] - r["stochastic_success"]) > gap],
    }


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def render(result: dict[str, Any]) -> str:
    lines = [*heading("Deterministic and stochastic evaluation of checkpoints", result), machine_line(result), "",
             f"Every checkpoint of each run, {result['episodes']} episodes per policy (the same episodes for "
             f"both). Lowest after solving: the lowest success rate from the first checkpoint at ≥ "
             f"{result['threshold']} on. Length: mean episode length (the time limit means an episode never "
             "reached a goal).", "",
             "| run | checkpoints | lowest after solving, deterministic | lowest after solving, stochastic |"
             " checkpoints where they differ by > " + f"{result['gap']} |", "|---|---:|---:|---:|---|"]
    for run in result["runs"]:
        low = run["lowest_after_solving"]
        differ = ", ".join(f"{r['steps']:,}: {r['deterministic_success']:.2f} (length {r['deterministic_length']:.0f})"
                           f" vs {r['stochastic_success']:.2f} (length {r['stochastic_length']:.0f})"
                           for r in run["disagreements"]) or "none"
        lines.append(f"| {run['run']} | {len(run['checkpoints'])} | {_cell(low['deterministic'])} | "
                     f"{_cell(low['stochastic'])} | {differ} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = run_directories_parser(__doc__)
    parser.add_argument("--backbone", nargs="+", help="only runs of these backbones")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per policy and checkpoint")
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--gap", type=float, default=0.2, help="list checkpoints where the policies differ by more")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runs = [run for directory in args.directories for run in find_runs(directory)
            if args.backbone is None or run.config["backbone"] in args.backbone]
    result = {**provenance(), "machine": machine_info(), "episodes": args.episodes, "threshold": args.threshold,
              "gap": args.gap, "runs": [study_run(run, args.episodes, args.threshold, args.gap) for run in runs]}
    write_results(args.name, result, render, args.out)


if __name__ == "__main__":
    main()
