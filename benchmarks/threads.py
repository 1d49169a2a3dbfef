"""Training speed against torch's thread count, on an idle core pair and with a core held by another process.

Each measurement is a real ``train_rl.py`` run of ``--steps`` env steps (evaluation only at the end) in a fresh
process, so that the OpenMP environment (``OMP_WAIT_POLICY``) is read before torch starts its thread pool. The
conditions are measured in interleaved rounds (every condition once per round, in a new random order each
round), because the machine is shared and its load drifts: compare conditions within a round.

Conditions: each config × ``--threads`` × ``--wait-policies`` × load (``none``: as the machine is;
``busy``: plus one process spinning on a core for the whole measurement).

Usage::

    .venv/bin/python benchmarks/threads.py                     # about 10 minutes on 2 cores
    .venv/bin/python benchmarks/threads.py --steps 4096 --rounds 1 --configs demo   # smoke run
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
CONFIGS = {"demo": ["--config", "configs/demo.yaml"], "defaults": [],
           "minigrid_s9": ["--config", "configs/minigrid_memory_s9.yaml"]}
SPIN = "while True:\n    pass\n"


def measure(config: str, threads: int, wait_policy: str, steps: int, timeout: float) -> tuple[float, bool]:
    """Env steps per second of one training run (``summary.json``'s ``steps_per_second``), and whether it was
    stopped at ``timeout`` seconds (then the speed is an upper bound: ``steps / timeout``)."""
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if wait_policy != "default":
        env["OMP_WAIT_POLICY"] = wait_policy
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory() as log_dir:
        command = [sys.executable, "train_rl.py", *CONFIGS[config], "--threads", str(threads), "-n", str(steps),
                   "--eval-freq", "0", "--checkpoint-freq", "0", "--n-eval-episodes", "4", "--log-dir", log_dir]
        try:
            subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return steps / timeout, True
        summary = next(Path(log_dir).glob("*/summary.json"))
        return float(json.loads(summary.read_text())["steps_per_second"]), False


def run_round(conditions: list[tuple[str, int, str, str]], steps: int, timeout: float) -> list[dict[str, Any]]:
    """Every condition once, in a random order; ``busy`` ones with a spinning process alongside."""
    rows = []
    for config, threads, policy, load in random.sample(conditions, len(conditions)):
        spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if load == "busy" else None
        try:
            speed, timed_out = measure(config, threads, policy, steps, timeout)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        row = {"config": config, "threads": threads, "wait_policy": policy, "load": load, "steps_per_second": speed,
               "timed_out": timed_out, "load_average": round(os.getloadavg()[0], 2)}
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median steps/s per condition, and its slowdown against the fastest thread setting of the same config and
    load."""
    keys = sorted({(r["config"], r["load"], r["threads"], r["wait_policy"]) for r in rows})
    table = []
    for config, load, threads, policy in keys:
        mine = [r for r in rows if (r["config"], r["load"], r["threads"], r["wait_policy"])
                == (config, load, threads, policy)]
        table.append({"config": config, "load": load, "threads": threads, "wait_policy": policy,
                      "steps_per_second": [r["steps_per_second"] for r in mine],
                      "timed_out": [r["timed_out"] for r in mine],
                      "median": statistics.median(r["steps_per_second"] for r in mine)})
    for row in table:
        best = max(r["median"] for r in table if (r["config"], r["load"]) == (row["config"], row["load"]))
        row["slowdown_vs_best"] = round(best / row["median"], 2)
    return table


def markdown(result: dict[str, Any]) -> str:
    lines = heading("Training speed against torch threads, idle and with a busy core", result)
    lines += [machine_line(result), "",
              f"{result['steps']} env steps per run, a fresh process each, {result['rounds']} interleaved rounds. "
              "`busy`: one extra process spins on a core during the run. Slowdown: the fastest setting's median "
              "over this one's, within the same config and load. `<N`: stopped after "
              f"{result['timeout']:.0f} s, so the speed was below N.", "",
              "| config | load | threads | OMP_WAIT_POLICY | steps/s (per round) | median | slowdown vs best |",
              "|---|---|---:|---|---|---:|---:|"]
    for row in result["table"]:
        speeds = " / ".join(("<" if out else "") + f"{s:,.0f}"
                            for s, out in zip(row["steps_per_second"], row["timed_out"], strict=True))
        lines.append(f"| {row['config']} | {row['load']} | {row['threads']} | {row['wait_policy']} | {speeds} | "
                     f"{row['median']:,.0f} | {row['slowdown_vs_best']:.2f}× |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=["demo", "defaults"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--wait-policies", nargs="+", choices=["default", "PASSIVE", "ACTIVE"],
                        default=["default", "PASSIVE"])
    parser.add_argument("--loads", nargs="+", choices=["none", "busy"], default=["none", "busy"])
    parser.add_argument("--steps", type=int, default=16_384)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is stopped")
    parser.add_argument("--seed", type=int, default=0, help="seed of the round orders")
    parser.add_argument("--name", default="threads", help="results file name (benchmarks/results/<name>.{json,md})")
    args = parser.parse_args()
    random.seed(args.seed)
    # a wait policy only matters where there is more than one thread to wait
    conditions = [(c, t, p, load) for c, t, p, load in
                  itertools.product(args.configs, args.threads, args.wait_policies, args.loads)
                  if t > 1 or p == "default"]
    result: dict[str, Any] = {**provenance(), "machine": machine_info(), "steps": args.steps, "rounds": args.rounds,
                              "timeout": args.timeout}
    rows = [row for _ in range(args.rounds) for row in run_round(conditions, args.steps, args.timeout)]
    result["rows"] = rows
    result["table"] = summarise(rows)
    write_results(args.name, result, markdown)


if __name__ == "__main__":
    main()
