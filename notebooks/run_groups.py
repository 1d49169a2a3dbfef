"""Groups of finished runs side by side, as results files: for each task, every run's final deterministic score
(success rate where the task reports one, else mean return) and evaluation curve, one row per group and seed.
For ablations whose runs were trained apart (a study's runs against a diagnosis run with one option changed).

Usage::

    .venv/bin/python notebooks/run_groups.py --name popgym_episode_time \\
        --group "defaults" runs/tune/suite/trial_0000 --group "episode_time=sinusoidal" runs/diag \\
        --command "python train_rl.py ..." --note "What was compared and why."
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from common import RESULTS, heading, machine_info, machine_line, provenance, write_results
from tune_result import curve_text, runs


def grouped(groups: list[list[str]]) -> list[dict[str, Any]]:
    """``[[label, directory, ...], ...]`` → every finished run of each group with its task and seed."""
    rows = []
    for label, *directories in groups:
        for directory in directories:
            for run in runs(Path(directory)):
                if run["finished"]:
                    task, _, seed = run["run"].rpartition("__")
                    rows.append({"group": label, "task": task.split("__")[0], "seed": int(seed), **run})
    return rows


def final(row: dict[str, Any]) -> float:
    """A run's final deterministic score: its success rate where the task reports one, else its mean return."""
    return row["final_success_rate"] if row["final_success_rate"] is not None else row["final_mean_return"]


def summary(rows: list[dict[str, Any]], draws: int = 10_000) -> dict[str, dict[str, float]]:
    """Per group, the mean final score over the (task, seed) pairs every group has, with a 95 % bootstrap CI
    stratified by task (each task's seeds resampled)."""
    groups = sorted({r["group"] for r in rows})
    pairs = set.intersection(*({(r["task"], r["seed"]) for r in rows if r["group"] == g} for g in groups))
    rng = np.random.default_rng(0)
    out = {}
    for group in groups:
        by_task: dict[str, list[float]] = {}
        for r in rows:
            if r["group"] == group and (r["task"], r["seed"]) in pairs:
                by_task.setdefault(r["task"], []).append(final(r))
        scores = [np.asarray(v) for v in by_task.values()]
        means = np.concatenate([rng.choice(v, (draws, len(v))) for v in scores], axis=1).mean(axis=1)
        out[group] = {"mean": float(np.concatenate(scores).mean()), "low": float(np.quantile(means, 0.025)),
                      "high": float(np.quantile(means, 0.975)), "runs": sum(len(v) for v in scores)}
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [*heading(result["title"], result), machine_line(result), ""]
    for note in result["notes"]:
        lines += [note, ""]
    lines += ["Mean final score over the tasks and seeds every group ran (95 % bootstrap CI, seeds resampled "
              "within each task):", "", "| group | runs | mean final score |", "|---|---:|---:|"]
    lines += [f"| {group} | {s['runs']} | {s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}] |"
              for group, s in result["summary"].items()]
    lines.append("")
    for task in sorted({row["task"] for row in result["runs"]}):
        lines += [f"## {task}", "", "| group | seed | final | evaluation curve |", "|---|---:|---:|---|"]
        rows = sorted((r for r in result["runs"] if r["task"] == task), key=lambda r: (r["group"], r["seed"]))
        lines += [f"| {row['group']} | {row['seed']} | {final(row):.2f} | {curve_text(row)} |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="results file name")
    parser.add_argument("--title", default="Runs compared by group")
    parser.add_argument("--group", nargs="+", action="append", required=True, metavar="LABEL_THEN_DIRS",
                        help="a label, then study or run directories; repeat for each group")
    parser.add_argument("--command", nargs="*", default=[], help="the commands that trained the runs")
    parser.add_argument("--note", nargs="*", default=[], help="paragraphs to print above the tables")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if any(len(group) < 2 for group in args.group):
        parser.error("--group: expected a label and at least one directory")
    result = {**provenance(), "machine": machine_info(), "title": args.title,
              "notes": [*(f"Command: `{c}`" for c in args.command), *args.note], "runs": grouped(args.group)}
    result["summary"] = summary(result["runs"])
    write_results(args.name, result, markdown, args.out)


if __name__ == "__main__":
    main()
