"""Would SB3's SubprocVecEnv speed up a MiniGrid run? Training speed of the default GTrXL learner on
MiniGrid-MemoryS11-v0 with its 16 envs stepped in this process (engram's DummyVecEnv) or one process each
(SB3's ``SubprocVecEnv``), as the machine is and with one more core held by a spinning process.

MiniGrid's observation code is pure Python and takes about half of a run's time (profile_gtrxl_minigrid_s11.md),
so spreading the envs over processes is the candidate fix where an env dominates. Both learners are
built once, seeded alike, and measured in a random order within each round (``learn`` for ``--steps`` env steps,
rollouts and updates), wall steps/s: the envs' processes work while this one waits.

Usage::

    .venv/bin/python notebooks/subproc_envs.py            # about 2 minutes on 2 idle cores
    .venv/bin/python notebooks/subproc_envs.py --rounds 1 --steps 1024 --name /tmp/subproc   # smoke run
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
from common import heading, machine_info, machine_line, provenance, write_results
from stable_baselines3.common.vec_env import SubprocVecEnv, VecMonitor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from envs import make_env  # noqa: E402
from envs.vec_env import CopySeeding, SeededDummyVecEnv  # noqa: E402
from experiments.config import build_config  # noqa: E402
from experiments.training import build_model  # noqa: E402

SPIN = "while True:\n    pass\n"
"""a process that holds one core"""


class SeededSubprocVecEnv(CopySeeding, SubprocVecEnv):
    """SB3's SubprocVecEnv with engram's per-copy seeds (as ``SeededDummyVecEnv``)."""


def learner(vec_env: str, env_id: str, log_dir: str) -> Any:
    """The default learner of ``train_rl.py --env env_id``, on envs stepped in this process or in one each."""
    config = build_config(None, {"env": env_id})
    factories = [partial(make_env, env_id) for _ in range(config.n_envs)]
    venv = SeededSubprocVecEnv(factories) if vec_env == "subproc" else SeededDummyVecEnv(factories)
    venv.seed(config.seed)
    return build_model(config, VecMonitor(venv), log_dir)


def timed_learn(model: Any, steps: int) -> float:
    before, started = model.num_timesteps, time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    return (model.num_timesteps - before) / (time.perf_counter() - started)


def markdown(result: dict[str, Any]) -> str:
    lines = heading("SubprocVecEnv against in-process envs on MiniGrid", result)
    lines += [machine_line(result), "",
              f"Default GTrXL learner on `{result['env']}` (16 envs), one torch thread, `learn` for {result['steps']} "
              f"env steps per measurement, {result['rounds']} interleaved rounds, wall steps/s. Load `as is`: the "
              "machine as other users left it; `+1 busy`: one more process spinning on a core.", "",
              *([result["note"], ""] if result.get("note") else []),
              "| load | envs | steps/s (per round) | median | against in-process |", "|---|---|---|---:|---:|"]
    for row in result["table"]:
        speeds = " / ".join(f"{s:,.0f}" for s in row["steps_per_second"])
        lines.append(f"| {'as is' if row['load'] == 'none' else '+1 busy'} | {row['vec_env']} | {speeds} | "
                     f"{row['median']:,.0f} | {row['ratio']:.2f}× |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="MiniGrid-MemoryS11-v0")
    parser.add_argument("--steps", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="subproc_envs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    result: dict[str, Any] = {**provenance(), "machine": machine_info(), "env": args.env, "steps": args.steps,
                              "rounds": args.rounds}
    rows = []
    with tempfile.TemporaryDirectory() as log_dir:
        models = {name: learner(name, args.env, log_dir) for name in ("in-process", "subproc")}
        for model in models.values():  # warm-up: one rollout and update each
            timed_learn(model, model.n_steps * model.n_envs)
        for round_index in range(args.rounds):
            conditions = [(name, load) for name in models for load in ("none", "busy")]
            for name, load in random.Random(round_index).sample(conditions, len(conditions)):
                spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if load == "busy" else None
                try:
                    speed = timed_learn(models[name], args.steps)
                finally:
                    if spinner is not None:
                        spinner.kill()
                        spinner.wait()
                rows.append({"round": round_index, "vec_env": name, "load": load, "steps_per_second": round(speed)})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        models["subproc"].get_env().close()
    table = []
    for load in ("none", "busy"):
        for name in ("in-process", "subproc"):
            speeds = [r["steps_per_second"] for r in rows if (r["vec_env"], r["load"]) == (name, load)]
            table.append({"load": load, "vec_env": name, "steps_per_second": speeds,
                          "median": statistics.median(speeds)})
        for row in table[-2:]:
            row["ratio"] = round(row["median"] / table[-2]["median"], 2)
    result.update(rows=rows, table=table)
    write_results(args.name, result, markdown)


if __name__ == "__main__":
    main()
