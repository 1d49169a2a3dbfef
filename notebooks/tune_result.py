"""A ``train_rl.py tune`` study next to baseline runs, as results files: every trial (state, objective, per-seed
scores, evaluation curve of each run, values) and every baseline run (final success rate or return, curve).

Usage::

    .venv/bin/python notebooks/tune_result.py runs/tune/minigrid_s11 --baseline runs/s11_defaults \\
        --name tune_minigrid_s11 --command "python train_rl.py tune ..."
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from common import RESULTS, heading, machine_info, machine_line, provenance, write_results

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from experiments.studies.runs import find_runs  # noqa: E402


def runs(directory: Path) -> list[dict[str, Any]]:
    """Every run under ``directory``: its name, final summary (if finished) and evaluation curve."""
    found = []
    for run in find_runs(directory):
        summary = run.summary
        steps, scores = run.curve(success=run.has_success())
        found.append({"run": run.name, "finished": summary is not None,
                      "final_success_rate": None if summary is None else summary["final_success_rate"],
                      "final_mean_return": None if summary is None else summary["final_mean_return"],
                      "curve": [[int(s), round(float(v), 3)] for s, v in zip(steps, scores, strict=True)]})
    return found


def trials(directory: Path) -> list[dict[str, Any]]:
    import optuna

    study = optuna.load_study(study_name=directory.name, storage=f"sqlite:///{directory / 'study.db'}")
    return [{"number": t.number, "state": t.state.name.lower(), "value": t.value, "params": t.params,
             "scores": t.user_attrs.get("scores"), "runs": runs(directory / f"trial_{t.number:04d}")}
            for t in study.trials]


def curve_text(run: dict[str, Any]) -> str:
    return ", ".join(f"{steps // 1000}k: {score:.2f}" for steps, score in run["curve"])


def markdown(result: dict[str, Any]) -> str:
    lines = heading(f"Tuning study `{result['study']}` and its baseline", {"command": result["script"]})
    lines += [machine_line(result), ""]
    for paragraph in result.get("notes", []):
        lines += [paragraph, ""]
    lines += ["## Trials", "",
              "| trial | state | objective | per-seed final score | values |", "|---:|---|---:|---|---|"]
    for trial in result["trials"]:
        value = "—" if trial["value"] is None else f"{trial['value']:.3f}"
        params = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in trial["params"].items())
        lines.append(f"| {trial['number']} | {trial['state']} | {value} | {trial['scores']} | {params} |")
    curves = [f"- trial {t['number']}, {run['run']}: {curve_text(run)}"
              for t in result["trials"] for run in t["runs"] if run["curve"]]
    if curves:  # none where the trials evaluated only at the end (--eval-freq 0)
        lines += ["", "Evaluation curves of the trials' runs (success rate where reported, else mean return):", "",
                  *curves]
    lines += ["", "## Baseline", "", "| group | run | finished | final success | evaluation curve |",
              "|---|---|---|---:|---|"]
    for run in result["baseline"]:
        final = "—" if run["final_success_rate"] is None else f"{run['final_success_rate']:.2f}"
        lines.append(f"| {run['group']} | {run['run']} | {run['finished']} | {final} | {curve_text(run)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, help="the tune directory ({log_dir}/tune/{name})")
    parser.add_argument("--baseline", nargs="*", type=Path, default=[], help="directories of baseline runs")
    parser.add_argument("--name", required=True)
    parser.add_argument("--command", nargs="*", default=[], help="the commands that made the study and baseline")
    parser.add_argument("--note", nargs="*", default=[], help="paragraphs to print above the tables")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = {**provenance(), "machine": machine_info(), "study": args.study.name, "commands": args.command,
              "script": f"python notebooks/tune_result.py {args.study} --baseline {' '.join(map(str, args.baseline))} "
                        f"--name {args.name} --command ... --note ...",
              "notes": [*(f"Command: `{c}`" for c in args.command), *args.note],
              "trials": trials(args.study),
              "baseline": [{"group": d.name, **run} for d in args.baseline for run in runs(d)]}
    write_results(args.name, result, markdown, args.out)


if __name__ == "__main__":
    main()
