"""`train_rl.py lm train` speed against torch's thread count, as the machine is and with one more core held by a
spinning process: the language-model side of `notebooks/threads.py` (docs/notes/threads.md).

Each measurement is the real command in a fresh process (so OpenMP's pool starts with the thread count asked,
and with the wait policy ``train_rl.py`` sets): ``lm train -c CONFIG -p steps=N threads=T``, timed by the
training loop itself (``steps_per_second`` of the run's ``summary.json``: data loading and start-up excluded).
Conditions run in a random order within each round, so that the machine's drifting load falls on all alike.

Usage::

    .venv/bin/python notebooks/lm_threads.py                       # about 8 minutes on 2 idle cores
    .venv/bin/python notebooks/lm_threads.py --rounds 1 --steps 10  # smoke run
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import heading, machine_info, machine_line, provenance, write_results

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from experiments.threads import WAIT_POLICY  # noqa: E402

SPIN = "while True:\n    pass\n"
"""a process that holds one core"""


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median steps/s per condition, and its slowdown against the fastest setting of the same config and load."""
    keys = sorted({(r["config"], r["load"], r["threads"], r["wait_policy"]) for r in rows})
    table = []
    for config, load, threads, policy in keys:
        speeds = [r["steps_per_second"] for r in rows
                  if (r["config"], r["load"], r["threads"], r["wait_policy"]) == (config, load, threads, policy)]
        table.append({"config": config, "load": load, "threads": threads, "wait_policy": policy,
                      "steps_per_second": speeds, "median": statistics.median(speeds)})
    for row in table:
        best = max(r["median"] for r in table if (r["config"], r["load"]) == (row["config"], row["load"]))
        row["slowdown_vs_best"] = round(best / row["median"], 2)
    return table


def speed_text(value: float) -> str:
    """A speed for a table: whole steps/s, or two decimals below 100."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def markdown(result: dict[str, Any]) -> str:
    lines = heading("`lm train` speed against torch threads", result)
    lines += [machine_line(result), "",
              f"`lm train -c {result['config']}` for {result['steps']} training steps (each a batch of segments), "
              f"the real command in a fresh process per measurement, {result['rounds']} interleaved rounds. "
              "Load `as is`: the machine as other users left it; `+1 busy`: one more process spinning on a core. "
              "Slowdown: the fastest setting's median over this one's, within the same config and load.", "",
              "| config | load | threads | OMP_WAIT_POLICY | steps/s (per round) | median | slowdown vs best |",
              "|---|---|---:|---|---|---:|---:|"]
    for row in result["table"]:
        speeds = " / ".join(map(speed_text, row["steps_per_second"]))
        load = "as is" if row["load"] == "none" else "+1 busy"
        lines.append(f"| {row['config']} | {load} | {row['threads']} | {row['wait_policy']} | {speeds} | "
                     f"{speed_text(row['median'])} | {row['slowdown_vs_best']:.2f}× |")
    return "\n".join(lines) + "\n"


def measure(config: str, steps: int, threads: int, busy: bool, log_dir: str) -> float:
    """Training steps per second of one ``lm train`` run, with a spinning process beside it if ``busy``."""
    command = [sys.executable, str(ROOT / "train_rl.py"), "lm", "train", "-c", str(ROOT / config), "-p",
               f"steps={steps}", f"eval_every={steps}", f"checkpoint_every={steps}", f"threads={threads}",
               f"log_dir={log_dir}"]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if busy else None
    try:
        subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    runs = list(Path(log_dir).glob("*/summary.json"))
    return json.loads(runs[0].read_text())["steps_per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/lm/python.yaml")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--loads", nargs="+", choices=["none", "busy"], default=["none", "busy"])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="seed of the orders within rounds")
    parser.add_argument("--name", default="lm_threads", help="results file name (benchmarks/results/<name>.*)")
    args = parser.parse_args()
    rows, policy = [], os.environ.get("OMP_WAIT_POLICY", WAIT_POLICY)  # the one train_rl.py runs with
    for round_index in range(args.rounds):
        conditions = list(itertools.product(args.threads, args.loads))
        for threads, load in random.Random(args.seed + round_index).sample(conditions, len(conditions)):
            with tempfile.TemporaryDirectory() as log_dir:
                speed = measure(args.config, args.steps, threads, load == "busy", log_dir)
            row = {"config": args.config, "threads": threads, "load": load, "wait_policy": policy,
                   "round": round_index, "steps_per_second": speed, "load_average": round(os.getloadavg()[0], 2)}
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    result: dict[str, Any] = {**provenance(), "machine": machine_info(), "config": args.config, "steps": args.steps,
                              "rounds": args.rounds, "rows": rows, "table": summarise(rows)}
    write_results(args.name, result, markdown)


if __name__ == "__main__":
    main()
