"""Length transfer on T-Maze: the final policy of each run, evaluated on corridors of other lengths,
with the kNN retrieval of its attention on and switched off.

A policy trained on one corridor length L is scored (deterministic, as in training's evaluations)
on every length of ``--lengths``, on fresh episodes, with its own memory or, with ``--store-length``,
the ``knn`` and ``compressive`` members with a longer store around the same weights. ``without
retrieval`` repeats it with the gate of every ``knn`` attention at ``g = 0``
(:class:`policies.attention.knn.KNNMemory`: the output is then the local attention's alone), the
ablation that says whether the cue came back through retrieval or through the local window. Runs
without a ``knn`` attention get only the first.

Usage::

    .venv/bin/python notebooks/length_transfer.py --name length_transfer_knn /work/runs/t100_knn \\
        --lengths 100 500 1000 --store-length 1024
"""

from __future__ import annotations

from typing import Any

import torch
from common import heading, machine_info, machine_line, provenance, run_directories_parser, write_results

from agents import ALGOS
from envs.registry import make_vec_env
from experiments.evaluation import evaluate
from experiments.studies.runs import Run, find_runs
from experiments.training import EVAL_SEED_OFFSET
from policies.attention.knn import KNNMemory

EPISODE_SEED_OFFSET = 2
"""the episodes differ from those the runs evaluated on during training"""


def switch_off_retrieval(policy: torch.nn.Module) -> int:
    """Set the gate of every kNN attention in ``policy`` to ``g = σ(−∞) = 0``; returns how many there were."""
    layers = [m for m in policy.modules() if isinstance(m, KNNMemory)]
    with torch.no_grad():
        for layer in layers:
            layer.gate_logit.fill_(float("-inf"))
    return len(layers)


def success(run: Run, model: Any, length: int, episodes: int, envs: int | None = None) -> float | None:
    """Deterministic success rate over ``episodes`` on a corridor of ``length``, with ``envs`` parallel
    copies (default: the run's ``n_eval_envs``)."""
    config = run.config
    seed = int(config["seed"]) + EVAL_SEED_OFFSET + EPISODE_SEED_OFFSET
    env = make_vec_env(config["env"], envs or int(config.get("n_eval_envs", 4)), seed,
                       **{**config.get("env_kwargs", {}), "length": length})
    result = evaluate(model, env, episodes)
    env.close()
    return result.success_rate


STORE_MEMBERS = ("knn", "compressive")
"""attentions whose ``memory_length`` is a store behind a fixed local window (``local_window``,
``fifo_length``), so a longer store reaches further without changing what is seen step by step"""


def load(run: Run, store_length: int | None) -> Any:
    """The run's final model; with ``store_length`` and a store member, rebuilt with a store of that many
    steps around the same weights (no parameter's shape depends on it)."""
    algo = ALGOS[run.config["algo"]]
    model = algo.load(run.directory / "model.zip", device="cpu")
    backbone = model.policy_kwargs["backbone_kwargs"]
    if store_length is None or backbone.get("attention") not in STORE_MEMBERS:
        return model
    kwargs = {**model.policy_kwargs, "backbone_kwargs": {**backbone, "memory_length": store_length}}
    return algo.load(run.directory / "model.zip", device="cpu", custom_objects={"policy_kwargs": kwargs})


def transfer(run: Run, lengths: list[int], episodes: int, store_length: int | None,
             envs: int | None = None) -> dict[str, Any]:
    model = load(run, store_length)
    backbone = model.policy_kwargs["backbone_kwargs"]
    row: dict[str, Any] = {"run": str(run.directory), "seed": int(run.config["seed"]),
                           "member": backbone.get("attention") or run.config["backbone"],
                           "memory_length": backbone.get("memory_length"),
                           "trained_length": int(run.config["env_kwargs"]["length"]),
                           "env_steps": run.timesteps(), "init_from": run.config.get("init_from") or None,
                           "with_retrieval": {n: success(run, model, n, episodes, envs) for n in lengths}}
    if switch_off_retrieval(model.policy):
        row["without_retrieval"] = {n: success(run, model, n, episodes, envs) for n in lengths}
    return row


def _cells(values: dict[int, float | None] | None, lengths: list[int]) -> str:
    if values is None:
        return " | ".join("—" for _ in lengths)
    return " | ".join("—" if values[n] is None else f"{values[n]:.2f}" for n in lengths)


def render(result: dict[str, Any]) -> str:
    lengths = result["lengths"]
    columns = " | ".join(f"L = {n}" for n in lengths)
    lines = [*heading("Length transfer on T-Maze", result), machine_line(result), "",
             f"The final model of each run, {result['episodes']} fresh episodes per length, deterministic "
             "policy (success rate). Without retrieval: every `knn` gate at g = 0 (local attention only).", "",
             f"| run | member | trained on L | env steps | started from | memory (store) | policy | {columns} |",
             "|---|---|---:|---:|---|---:|---|" + "---:|" * len(lengths)]
    for row in result["runs"]:
        start = row["init_from"] or "scratch"
        memory = "—" if row["memory_length"] is None else row["memory_length"]
        lines.append(f"| {row['run']} | {row['member']} | {row['trained_length']} | {row['env_steps']:,} | {start} | "
                     f"{memory} | as trained | {_cells(row['with_retrieval'], lengths)} |")
        if "without_retrieval" in row:
            lines.append(f"| | | | | | | without retrieval | {_cells(row['without_retrieval'], lengths)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = run_directories_parser(__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", required=True, help="corridor lengths to evaluate on")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per run and length")
    parser.add_argument("--store-length", type=int, help="evaluate knn and compressive members with a store of "
                        "this many steps (default: the run's own; other members keep their own memory)")
    parser.add_argument("--envs", type=int, help="parallel env copies per evaluation (default: the run's n_eval_envs)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runs = [run for directory in args.directories for run in find_runs(directory) if run.summary is not None]
    result = {**provenance(), "machine": machine_info(), "episodes": args.episodes, "lengths": args.lengths,
              "store_length": args.store_length,
              "envs": args.envs,
              "runs": [transfer(run, args.lengths, args.episodes, args.store_length, args.envs) for run in runs]}
    write_results(args.name, result, render, args.out)


if __name__ == "__main__":
    main()
