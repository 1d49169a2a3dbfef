"""Learning table from run directories: how fast and how reliably each learner × backbone solves a task.

For every group of runs (task, learner, backbone) it reports the runs, the final success rate
(mean ± std over seeds), how many runs solved the task (final success ≥ threshold), the env
steps and wall seconds at the first evaluation reaching the threshold (median over the runs
that reached it), how many runs diverged or failed, and the rollout buffer's memory-state bytes
per stored env step (runs that record it). Runs that started from another run's weights
(``init_from``, a curriculum) also get that run's env steps and wall seconds, so the cost of the
whole curriculum is in the table. It reads only the files runs write
(``config.yaml``, ``evaluations.csv``, ``summary.json``, ``status.json``), so studies launched in
any way can be tabulated; the commands recorded in each study's ``study.yaml`` are copied.

Usage::

    .venv/bin/python benchmarks/learning_table.py --name learning_tmaze100 runs/learning_tmaze100
    .venv/bin/python benchmarks/learning_table.py --name ppo_vs_vmpo runs/ppo_study runs/vmpo_study
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from common import heading, machine_info, provenance, run_directories_parser, write_results

from experiments.studies.report import reliability
from experiments.studies.runs import INTERRUPTED, Run, find_runs, read_study_record, task_label


def time_to_threshold(run: Run, threshold: float) -> tuple[int, float] | None:
    """Env steps and wall seconds of the first evaluation whose success rate reaches ``threshold``."""
    for row in run.evaluations:
        if row["success_rate"] != "" and float(row["success_rate"]) >= threshold:
            return int(float(row["timesteps"])), float(row["wall_seconds"])
    return None


def warm_start(run: Run) -> tuple[int, float] | None:
    """Env steps and wall seconds of the run whose weights ``run`` started from (``init_from``), if any."""
    source = run.config.get("init_from")
    if not source:
        return None
    path = Path(source)
    summary = Run(path if path.is_dir() else path.parent).summary
    if summary is None:
        raise SystemExit(f"{run.directory}: init_from={source!r} has no summary.json to count its cost from")
    return int(summary["env_steps"]), float(summary["wall_seconds"])


def _seed(run: Run) -> int:
    return int(run.config.get("seed", -1))


def _median_summary(runs: list[Run], key: str) -> float | None:
    """The median of a ``summary.json`` entry over the runs that report it."""
    values = [run.summary[key] for run in runs if run.summary and run.summary.get(key) is not None]
    return statistics.median(values) if values else None


def _stopped(run: Run) -> dict[str, Any]:
    """For a run stopped before its budget (interrupted, no summary): where, and its last evaluation."""
    if run.state() != INTERRUPTED:
        return {}
    _, values = run.curve(True)
    return {"stopped_at": run.timesteps(), "last_evaluation": float(values[-1]) if values.size else None}


def summarise(runs: list[Run], threshold: float) -> dict[str, Any]:
    finals = [run.score(success=True) for run in runs]
    finals = [f for f in finals if f is not None]
    reached = [t for t in (time_to_threshold(run, threshold) for run in runs) if t is not None]
    warm = [w for w in (warm_start(run) for run in runs) if w is not None]
    outcomes = reliability(runs, success=True, threshold=threshold)
    return {
        "runs": len(runs), "seeds": sorted(_seed(run) for run in runs),
        "final_success_mean": float(np.mean(finals)) if finals else None,
        "final_success_std": float(np.std(finals)) if finals else None,
        "solved": outcomes.solved,
        "reached_threshold": len(reached),
        "median_steps_to_threshold": statistics.median(s for s, _ in reached) if reached else None,
        "median_seconds_to_threshold": statistics.median(w for _, w in reached) if reached else None,
        "median_warm_start_steps": statistics.median(s for s, _ in warm) if warm else None,
        "median_warm_start_seconds": statistics.median(w for _, w in warm) if warm else None,
        "diverged_or_failed": outcomes.diverged + outcomes.failed,
        "lowest_after_solving": outcomes.lowest_after_solving,
        "lowest_after_solving_stochastic": outcomes.lowest_after_solving_stochastic,
        "per_seed": {_seed(run): {"final": run.score(success=True),
                                  "lowest_after_solving": run.lowest_after_solving(True, threshold),
                                  **_stopped(run)}
                     for run in sorted(runs, key=_seed)},
        "env_steps": sorted({run.timesteps() for run in runs}),
        "buffer_bytes_per_step": _median_summary(runs, "buffer_bytes_per_step"),
    }


def table(directories: list[Path], threshold: float, by_directory: bool = False) -> list[dict[str, Any]]:
    """One row per task × learner × backbone (× directory with ``by_directory``: for variants of
    one setting, e.g. two entropy coefficients, kept in separate study directories)."""
    groups: dict[tuple[str, str, str, str], list[Run]] = defaultdict(list)
    for directory in directories:
        source = Path(directory).name if by_directory else ""
        for run in find_runs(directory):
            groups[(task_label(run.config), run.config["algo"], run.config["backbone"], source)].append(run)
    return [{"task": task, "algo": algo, "backbone": backbone, "source": source, **summarise(runs, threshold)}
            for (task, algo, backbone, source), runs in sorted(groups.items()) if any(r.has_success() for r in runs)]


def return_scored_tasks(directories: list[Path]) -> list[str]:
    """The tasks of runs that report no success rate (POPGym's, say), which the table leaves out."""
    return sorted({task_label(run.config) for directory in directories for run in find_runs(directory)
                   if not run.has_success()})


def study_commands(directories: list[Path]) -> list[dict]:
    return [command for directory in directories for command in read_study_record(directory).get("commands", [])]


def _cell(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _warm_cell(row: dict[str, Any]) -> str:
    if row.get("median_warm_start_steps") is None:
        return "—"
    return f"{row['median_warm_start_steps']:,.0f}, {row['median_warm_start_seconds']:,.0f}"


def _per_seed(per_seed: dict[int, dict[str, float | None]]) -> str:
    cells = []
    for seed, outcome in per_seed.items():
        cell = f"{seed}: {_cell(outcome['final'])}"
        if "stopped_at" in outcome:
            cell = f"{seed}: stopped at {outcome['stopped_at']:,} (last {_cell(outcome['last_evaluation'])})"
        if outcome["lowest_after_solving"] is not None:
            cell += f" ({_cell(outcome['lowest_after_solving'])})"
        cells.append(cell)
    return ", ".join(cells)


def _in_repository(directory: str) -> bool:
    """Whether a run directory lies inside this repository (a committed study), so a reader has it too."""
    path = Path(directory).resolve()
    return path.exists() and path.is_relative_to(Path(__file__).resolve().parents[1])


def render(result: dict[str, Any]) -> str:
    lines = [*heading(f"Learning table: {result['name']}", result),
             f"Runs from: {', '.join(f'`{d}`' for d in result['directories'])}. Threshold: success ≥ "
             f"{result['threshold']}. Steps and seconds to threshold: first evaluation reaching it, median "
             "over the runs that reached it. Lowest after solving: the lowest evaluation of any run after "
             "its first one at the threshold; stochastic: the same for the policy that samples its actions (— where "
             "the runs predate that evaluation). Warm start: the env steps and wall seconds (median) of the runs "
             "whose weights these started from (`init_from`), not included in the columns to threshold. Per seed: "
             "final success (lowest after solving, if it solved); a run stopped before its budget: where, and its last "
             "evaluation.",
             ""]
    commands = [f"- `{c['command']}` ({c['time']})" for c in result["study_commands"]]
    commands += [f"- `{c}`" for c in result["produced_by"]]
    outside = [d for d in result["directories"] if not _in_repository(d)]
    if outside:
        lines += [f"The run directories it reads ({', '.join(f'`{d}`' for d in outside)}) are not in the repository: "
                  + ("train them with the commands listed below, then run the command above." if commands else
                     "train them first, then run the command above."), ""]
    if commands:
        lines += ["Commands that produced the runs:", "", *commands, ""]
    if result.get("return_scored"):
        lines += [f"Left out, as their tasks report no success rate (`train_rl.py report` scores them by return): "
                  f"the runs of {', '.join(result['return_scored'])}.", ""]
    lines += ["| task | learner | backbone | runs | final success (mean ± std) | solved | env steps to threshold |"
              " wall s to threshold | warm start (steps, s) | diverged/failed | lowest after solving |"
              " lowest after solving, stochastic | buffer bytes/step | per seed |",
              "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in result["rows"]:
        success = ("—" if row["final_success_mean"] is None
                   else f"{row['final_success_mean']:.2f} ± {row['final_success_std']:.2f}")
        runs = f"{row['runs']} (`{row['source']}`)" if row.get("source") else row["runs"]
        lines.append(f"| {row['task']} | {row['algo']} | {row['backbone']} | {runs} | {success} | "
                     f"{row['solved']}/{row['runs']} | {_cell(row['median_steps_to_threshold'], 0)} | "
                     f"{_cell(row['median_seconds_to_threshold'], 0)} | {_warm_cell(row)} | "
                     f"{row['diverged_or_failed']} | "
                     f"{_cell(row['lowest_after_solving'])} | {_cell(row.get('lowest_after_solving_stochastic'))} | "
                     f"{_cell(row.get('buffer_bytes_per_step'), 0)} | "
                     f"{_per_seed(row['per_seed'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = run_directories_parser(__doc__)
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--by-directory", action="store_true",
                        help="one row per directory too (variants of one setting in separate studies)")
    parser.add_argument("--produced-by", action="append", default=[], metavar="COMMAND",
                        help="the command that produced runs outside a study (repeatable)")
    args = parser.parse_args()
    result = {**provenance(), "name": args.name, "machine": machine_info(), "threshold": args.threshold,
              "directories": [str(d) for d in args.directories],
              "study_commands": study_commands(args.directories), "produced_by": args.produced_by,
              "rows": table(args.directories, args.threshold, args.by_directory),
              "return_scored": return_scored_tasks(args.directories)}
    write_results(args.name, result, render, args.out)


if __name__ == "__main__":
    main()
