"""The spans that adaptive-span heads learned: how far back each head still looks after training.

Adaptive attention span (Sukhbaatar et al. 2019; ``-p gtrxl.attention=adaptive-span``) gives every
head a learned span ``z`` (``AdaptiveSpanPattern.spans``), shrunk by the ``span`` penalty where the
task does not need it. For every run this script loads each checkpoint and the final model and
reports the spans of every layer's heads in steps, beside the memory length and the final success.

Usage::

    .venv/bin/python notebooks/learned_spans.py --name learned_spans runs/demo_span
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch
from common import heading, machine_info, machine_line, provenance, run_directories_parser, write_results

from agents import ALGOS
from experiments.studies.runs import Run, find_runs
from policies.attention.adaptive_span import AdaptiveSpanPattern


def attentions(model_path: Path, algo: str) -> list[AdaptiveSpanPattern]:
    """Every adaptive-span attention of a saved model, first layer first."""
    model = ALGOS[algo].load(model_path, device="cpu")
    return [module for module in model.policy.modules() if isinstance(module, AdaptiveSpanPattern)]


def spans(model_path: Path, algo: str) -> list[list[float]]:
    """The learned span of every head of every adaptive-span attention, in steps: ``[layer][head]``."""
    return [module.spans().tolist() for module in attentions(model_path, algo)]


def checkpoints(run: Run) -> list[tuple[int, Path]]:
    """``(steps, path)`` of the run's checkpoints, oldest first."""
    found = [(int(match.group(1)), path) for path in (run.directory / "checkpoints").glob("model_*_steps.zip")
             if (match := re.fullmatch(r"model_(\d+)_steps\.zip", path.name))]
    return sorted(found)


def run_spans(run: Run) -> dict[str, Any]:
    algo = run.config["algo"]
    history = [{"timesteps": steps, "spans": spans(path, algo)} for steps, path in checkpoints(run)]
    final_attentions = attentions(run.directory / "model.zip", algo)
    final = [module.spans().tolist() for module in final_attentions]
    backbone_options = run.config.get(run.config["backbone"], {})
    if not final:
        raise SystemExit(f"{run.directory}: no adaptive-span attention in the model "
                         f"(attention {backbone_options.get('attention', 'relative')!r})")
    return {"run": f"{run.directory.parent.name}/{run.name}", "memory_length": backbone_options.get("memory_length"),
            "ramp": final_attentions[0].ramp, "final_success": (run.summary or {}).get("final_success_rate"),
            "final_spans": final, "history": history}


def _spans(layers: list[list[float]]) -> str:
    return "; ".join(f"layer {i}: " + ", ".join(f"{z:.1f}" for z in heads) for i, heads in enumerate(layers))


def render(result: dict[str, Any]) -> str:
    lines = [*heading("Learned attention spans (adaptive-span)", result), machine_line(result), "",
             "Spans `z` in steps, per layer, one number per head, from the final model; the memory length `M` is "
             "the longest possible span (every head starts there). A head's soft mask falls from 1 at `z` to 0 at "
             "`z + R` (ramp `R`), so it still sees keys up to `z + R` back: the farthest reach column. The last "
             "column gives the shortest head span at each checkpoint, which shows when the penalty started to bite.",
             "", "| run | M | R | final success | final spans (steps) | farthest reach `max z + R` | "
             "shortest span per checkpoint |", "|---|---:|---:|---:|---|---:|---|"]
    for run in result["runs"]:
        shortest = " → ".join(f"{min(min(layer) for layer in point['spans']):.1f}" for point in run["history"])
        success = "—" if run["final_success"] is None else f"{run['final_success']:.2f}"
        reach = min(max(max(layer) for layer in run["final_spans"]) + run["ramp"], run["memory_length"])
        lines.append(f"| {run['run']} | {run['memory_length']} | {run['ramp']} | {success} | "
                     f"{_spans(run['final_spans'])} | {reach:.1f} | {shortest or '—'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = run_directories_parser(__doc__, "run or study directories of runs with attention=adaptive-span")
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = [run for directory in args.directories for run in find_runs(directory)]
    result = {**provenance(), "machine": machine_info(), "runs": [run_spans(run) for run in runs]}
    write_results(args.name, result, render, args.out)


if __name__ == "__main__":
    main()
