"""Training speed against torch's thread count and OpenMP wait policy, as the machine is and with one more core
held by a spinning process.

One process per wait policy and round (``OMP_WAIT_POLICY`` is read when torch starts its OpenMP pool, so it
cannot change inside a process). Each builds the learners of ``--configs`` once, then measures every
(config, threads, load) in a random order: ``torch.set_num_threads``, then ``learn`` for ``--steps`` env steps
(rollouts and updates; at most ``--max-seconds``, after a warm-up rollout), in env steps per second.
Rounds alternate the policies, so that the machine's drifting load falls on all conditions alike: compare within
a round.

Usage::

    .venv/bin/python notebooks/threads.py                     # about 10 minutes on 2 idle cores
    .venv/bin/python notebooks/threads.py --rounds 1 --steps 1024 --configs demo   # smoke run
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
import time
from pathlib import Path
from typing import Any

from common import heading, machine_info, machine_line, provenance, write_results

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {"demo": "configs/demo.yaml", "defaults": None, "minigrid_s9": "configs/minigrid_memory_s9.yaml"}
SPIN = "while True:\n    pass\n"


def build(config_name: str, log_dir: str) -> Any:
    """The learner of a config, on its own envs (engram's training code, as ``train_rl.py`` builds it)."""
    sys.path.insert(0, str(ROOT))
    from experiments.config import build_config
    from experiments.training import build_model, make_envs

    file = CONFIGS[config_name]
    config = build_config(None if file is None else ROOT / file)
    env, _ = make_envs(config)
    return build_model(config, env, log_dir)


def timed_learn(model: Any, steps: int, max_seconds: float) -> float:
    """Env steps per second of ``learn`` for ``steps`` steps, stopped after the rollout that passes
    ``max_seconds``."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Deadline(BaseCallback):
        def _on_rollout_end(self) -> None:
            self.late = time.perf_counter() - started > max_seconds

        def _on_step(self) -> bool:
            return not getattr(self, "late", False)

    before = model.num_timesteps
    started = time.perf_counter()
    model.learn(steps, callback=Deadline(), reset_num_timesteps=False)
    return (model.num_timesteps - before) / (time.perf_counter() - started)


def worker(configs: list[str], threads: list[int], loads: list[str], steps: int, max_seconds: float,
           seed: int) -> list[dict[str, Any]]:
    """One round of one wait policy (run in its own process): every (config, threads, load) once."""
    import torch

    rows = []
    with tempfile.TemporaryDirectory() as log_dir:
        models = {name: build(name, log_dir) for name in configs}
        for model in models.values():  # warm-up: one rollout and update each
            timed_learn(model, model.n_steps * model.n_envs, max_seconds)
        conditions = list(itertools.product(configs, threads, loads))
        for name, count, load in random.Random(seed).sample(conditions, len(conditions)):
            torch.set_num_threads(count)
            spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if load == "busy" else None
            try:
                speed = timed_learn(models[name], steps, max_seconds)
            finally:
                if spinner is not None:
                    spinner.kill()
                    spinner.wait()
            rows.append({"config": name, "threads": count, "load": load, "steps_per_second": round(speed, 1),
                         "load_average": round(os.getloadavg()[0], 2)})
    return rows


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


def speed(value: float) -> str:
    """A speed for a table: whole steps/s, or two decimals below 100 (a language model's steps)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def markdown(result: dict[str, Any], title: str = "Training speed against torch threads and the OpenMP wait policy",
             measurement: str | None = None) -> str:
    """The results table; ``measurement`` says what one measurement timed (default: this script's ``learn``)."""
    measurement = measurement or (f"`learn` for {result['steps']} env steps (at most {result['max_seconds']:.0f} s) "
                                  "per measurement")
    lines = heading(title, result)
    lines += [machine_line(result), "",
              f"{measurement}, {result['rounds']} interleaved rounds. Load `as is`: the machine as other users left "
              "it (its load average is in the JSON, per measurement); `+1 busy`: one more process spinning on a "
              "core. Slowdown: the fastest setting's median over this one's, within the same config and load.", "",
              *([result["note"], ""] if result.get("note") else []),
              "| config | load | threads | OMP_WAIT_POLICY | steps/s (per round) | median | slowdown vs best |",
              "|---|---|---:|---|---|---:|---:|"]
    for row in result["table"]:
        speeds = " / ".join(map(speed, row["steps_per_second"]))
        load = "as is" if row["load"] == "none" else "+1 busy"
        lines.append(f"| {row['config']} | {load} | {row['threads']} | {row['wait_policy']} | {speeds} | "
                     f"{speed(row['median'])} | {row['slowdown_vs_best']:.2f}× |")
    return "\n".join(lines) + "\n"


def run_worker(args: argparse.Namespace, policy: str, seed: int) -> list[dict[str, Any]]:
    """A round of ``policy`` in a fresh process, with ``OMP_WAIT_POLICY`` set (or unset for ``default``)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    command = [sys.executable, __file__, "--worker", "--configs", *args.configs, "--threads",
               *map(str, args.threads), "--loads", *args.loads, "--steps", str(args.steps), "--max-seconds",
               str(args.max_seconds), "--seed", str(seed)]
    output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    rows = [{**row, "wait_policy": policy} for row in json.loads(output)]
    for row in rows:
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=["demo", "defaults"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--wait-policies", nargs="+", choices=["default", "PASSIVE", "ACTIVE"],
                        default=["default", "PASSIVE"])
    parser.add_argument("--loads", nargs="+", choices=["none", "busy"], default=["none", "busy"])
    parser.add_argument("--steps", type=int, default=4096)
    parser.add_argument("--max-seconds", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0, help="seed of the orders within rounds")
    parser.add_argument("--name", default="threads", help="results file name (benchmarks/results/<name>.{json,md})")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.configs, args.threads, args.loads, args.steps, args.max_seconds, args.seed)))
        return
    result: dict[str, Any] = {**provenance(), "machine": machine_info(), "steps": args.steps,
                              "max_seconds": args.max_seconds, "rounds": args.rounds}
    rows = []
    for round_index in range(args.rounds):
        order = random.Random(args.seed + round_index).sample(args.wait_policies, len(args.wait_policies))
        for policy in order:
            rows += [{**row, "round": round_index} for row in run_worker(args, policy, args.seed + round_index)]
    result["rows"] = rows
    result["table"] = summarise(rows)
    write_results(args.name, result, markdown)


if __name__ == "__main__":
    main()
