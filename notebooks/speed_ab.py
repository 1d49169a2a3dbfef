"""Steps per CPU-second of two checkouts of engram, interleaved: is a change faster than the commit before it?

Each round trains every case once in each checkout, in a fresh process per case and checkout (one torch thread,
one warm-up rollout, then ``--rollouts`` timed), the checkouts' order reversed every other round. The ratio of a
case is taken within each round (after / before) and summarised by its median and range, so that the load of a
shared machine, which moves absolute figures by tens of percent, cancels. Each checkout is measured with its own
``benchmarks/speed.py`` (its cases, learner defaults and ``PhaseTimer``).

Usage::

    git worktree add /tmp/before HEAD~1
    python notebooks/speed_ab.py --before /tmp/before --after . --rounds 5 \
        --cases gtrxl/T-Maze-20 gru/T-Maze-20 gtrxl/RepeatPreviousEasy --name speed_ab
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import heading, machine_info, machine_line, provenance, write_results

MEASURE = """
import json, sys, time
sys.path[:0] = [".", "benchmarks"]
import torch
torch.set_num_threads(1)
import speed
model = speed.case(sys.argv[1]).build()
steps = speed.rollout_steps(model)
model.learn(steps)
timer, cpu = speed.PhaseTimer(), time.process_time()
model.learn(int(sys.argv[2]) * steps, callback=timer, reset_num_timesteps=False)
cpu = time.process_time() - cpu
print(json.dumps({"steps_per_cpu_s": int(sys.argv[2]) * steps / cpu, "rollout_share": timer.collecting / cpu}))
"""


def measure(checkout: Path, case: str, rollouts: int) -> dict[str, float]:
    """One case trained in a fresh process of `checkout`: its steps/CPU-s and rollout share."""
    done = subprocess.run([sys.executable, "-c", MEASURE, case, str(rollouts)], cwd=checkout, capture_output=True,
                          text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)},
                          check=False)
    if done.returncode:
        raise SystemExit(f"{case} in {checkout} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def render(result: dict[str, Any]) -> str:
    lines = [*heading("Steps per CPU-second, before and after a change", result), machine_line(result)]
    s = result["settings"]
    lines += ["", f"Before: `{s['before']}` ({s['before_commit']}); after: `{s['after']}` ({s['after_commit']}). "
              f"{s['rounds']} interleaved rounds, one process per case, checkout and round; one torch thread; one "
              f"warm-up rollout, then {s['rollouts']} timed. Ratio: after / before within each round, median "
              "(range).", "", "| case | before, steps/CPU-s | after, steps/CPU-s | after / before (range) |",
              "|---|---:|---:|---:|"]
    for case, entry in result["cases"].items():
        lines.append(f"| {case} | {entry['before_median']:,.0f} | {entry['after_median']:,.0f} | "
                     f"{entry['ratio_median']:.2f} ({entry['ratio_range'][0]:.2f}–{entry['ratio_range'][1]:.2f}) |")
    return "\n".join(lines) + "\n"


def commit(checkout: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True,
                          check=False)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "*.py"], cwd=checkout,
                           capture_output=True, text=True, check=False).stdout.strip()
    return done.stdout.strip() + (" with uncommitted code" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="checkout of the commit before the change")
    parser.add_argument("--after", type=Path, required=True, help="checkout with the change")
    parser.add_argument("--cases", nargs="+", default=["gtrxl/T-Maze-20", "gru/T-Maze-20"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--name", default="speed_ab")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)  # as each measuring process runs; machine_info reports it
    checkouts = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {c: {"before": [], "after": []} for c in args.cases}
    for r in range(args.rounds):
        for case in args.cases:
            for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                runs[case][side].append(measure(checkouts[side], case, args.rollouts))
            b, a = (runs[case][side][-1]["steps_per_cpu_s"] for side in ("before", "after"))
            print(f"round {r}: {case:28s} before {b:7.0f} after {a:7.0f} × {a / b:.2f}", file=sys.stderr, flush=True)
    cases = {}
    for case, sides in runs.items():
        ratios = [a["steps_per_cpu_s"] / b["steps_per_cpu_s"] for a, b in zip(sides["after"], sides["before"],
                                                                                 strict=True)]
        cases[case] = {**sides, "ratios": ratios, "ratio_median": statistics.median(ratios),
                       "ratio_range": [min(ratios), max(ratios)],
                       **{f"{side}_median": statistics.median(x["steps_per_cpu_s"] for x in sides[side])
                          for side in sides}}
    result = {**provenance(), "machine": machine_info(), "cases": cases,
              "settings": {"rounds": args.rounds, "rollouts": args.rollouts, "cases": args.cases,
                           **{side: str(path) for side, path in checkouts.items()},
                           **{f"{side}_commit": commit(path) for side, path in checkouts.items()}}}
    write_results(args.name, result, render)


if __name__ == "__main__":
    main()
