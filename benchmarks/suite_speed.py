"""Suite speed: engram's default backbones in steps/s against the GRU, and RecurrentPPO's defaults at one budget.

Two parts, one torch thread throughout; ``--recurrent`` runs the first alone for the linear
recurrent memories (FFM, LRU, minGRU, Mamba, mLSTM) against the GRU on two POPGym tasks and T-Maze-20, with the
bytes each stores per env step in the rollout buffer:

1. **Steps/s in interleaved rounds.** One learner per (task, backbone), each exactly what
   ``train_rl.py --env TASK --backbone B`` builds with every default (no config, no ``-p``: MemoryPPO's
   defaults, 16 envs, the backbone's default size). After a warm-up rollout and update each, every round runs
   every learner once, in a shuffled order, for ``--steps`` env steps of ``learn`` (rollouts and updates); the
   ratio GTrXL/GRU is taken within each round, as the machine's load drifts between rounds. Each measurement
   gives env steps per wall second and per CPU second of this process (``time.process_time``: one torch thread,
   envs in-process, so this is the speed the learner would have on a core of its own). On a machine shared with
   other processes the wall rate follows their load from second to second; the CPU rate does not, and is
   the one the ratios and targets use.
2. **Against sb3-contrib's RecurrentPPO.** On each POPGym task, engram's default GTrXL and
   ``RecurrentPPO("MlpLstmPolicy", env, seed=0)`` (every other argument the library's default: one env,
   n_steps 128, batch 128, 10 epochs, lr 3e-4, LSTM 256 for actor and critic) each train ``--budget`` env steps
   from scratch; wall and CPU time of ``learn``, then the deterministic mean return over ``--episodes`` episodes
   on the same evaluation envs (engram's: 4 copies seeded ``seed + 10,000``). RecurrentPPO's env is engram's
   adapter, ``envs.make_vec_env(task, 1, seed=0)``: one copy, its observation one-hot encoded, which is what
   SB3's own preprocessing does to these tasks' ``Discrete`` and ``MultiDiscrete`` observations when given the
   id string, so both learners see the same input. The two alternate which goes first from task to task.

Usage::

    .venv/bin/python benchmarks/suite_speed.py            # about 35 minutes on a busy 2-core machine
    .venv/bin/python benchmarks/suite_speed.py --quick    # smoke run (a minute), prints and writes nothing
    .venv/bin/python benchmarks/suite_speed.py --recurrent --rounds 3    # the recurrent memories against the GRU
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import torch
from common import heading, machine_info, machine_line, provenance, write_results
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback

from envs import make_vec_env
from experiments.config import build_config
from experiments.evaluation import evaluate
from experiments.training import build_model, make_envs

POPGYM_TASKS = ("popgym-RepeatPreviousEasy-v0", "popgym-CountRecallEasy-v0")
SPEED_TASKS = (*POPGYM_TASKS, "MiniGrid-MemoryS11-v0")
BACKBONES = ("gtrxl", "gru", "mlp")
RECURRENT_MEMORIES = ("gru", "ffm", "lru", "mingru", "mamba", "mlstm")
"""``--recurrent``: the linear recurrent memories, and the GRU they are measured against"""
RECURRENT_TASKS = (*POPGYM_TASKS, "TMaze-20")
TASKS = {"TMaze-20": ("TMaze-v0", {"length": 20})}
"""tasks named by a label: the env id and its keyword arguments (any other task is an env id alone)"""
TARGET_GTRXL_OVER_GRU = 0.5
TARGET_OVER_GRU = {"gtrxl": TARGET_GTRXL_OVER_GRU, **{name: 1.0 for name in RECURRENT_MEMORIES if name != "gru"}}
"""each backbone's target of steps/s over the GRU's (none for the MLP)"""
TARGET_OVER_RECURRENT_PPO = 5.0


@dataclass
class Settings:
    steps: int = 16_384
    rounds: int = 3
    budget: int = 100_000
    episodes: int = 32
    speed_tasks: tuple[str, ...] = SPEED_TASKS
    score_tasks: tuple[str, ...] = POPGYM_TASKS
    backbones: tuple[str, ...] = BACKBONES
    seed: int = 0
    threads: int = 1
    against_recurrent_ppo: bool = True


def engram_default(task: str, backbone: str, seed: int) -> tuple[Any, Any]:
    """The learner ``train_rl.py --env task --backbone backbone --seed seed`` trains, and its evaluation envs,
    built in the same order (the envs, then the learner, which seeds every generator), so training from here
    draws the same numbers as that run does."""
    env_id, env_kwargs = TASKS.get(task, (task, {}))
    config = build_config(None, {"env": env_id, "env_kwargs": env_kwargs, "backbone": backbone, "seed": seed})
    env, eval_env = make_envs(config)
    return build_model(config, env, tensorboard_log=None), eval_env


class PhaseTimer(BaseCallback):
    """Wall time spent collecting rollouts (the rest of ``learn`` is updates)."""

    def __init__(self) -> None:
        super().__init__()
        self.collecting = 0.0
        self._began = 0.0

    def _on_rollout_start(self) -> None:
        self._began = time.perf_counter()

    def _on_rollout_end(self) -> None:
        self.collecting += time.perf_counter() - self._began

    def _on_step(self) -> bool:
        return True


def rates(steps: int, wall: float, cpu: float) -> dict[str, float]:
    """``steps`` env steps over ``wall`` seconds of wall time and ``cpu`` seconds of this process's CPU time."""
    return {"steps": steps, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "steps_per_second": round(steps / wall, 1), "steps_per_cpu_second": round(steps / cpu, 1)}


def timed_learn(model: Any, steps: int) -> dict[str, float]:
    """Env steps per wall and per CPU second of ``learn`` for ``steps`` more steps, the share of the wall time
    spent collecting rollouts, and the 1-minute load average at the end."""
    timer = PhaseTimer()
    before = model.num_timesteps
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(steps, callback=timer, reset_num_timesteps=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {**rates(model.num_timesteps - before, wall, cpu), "collect_share": round(timer.collecting / wall, 3),
            "load_average": round(os.getloadavg()[0], 2)}


def learners(s: Settings) -> dict[tuple[str, str], Any]:
    """One default learner per (task, backbone), after a warm-up rollout and update each."""
    models = {(task, backbone): engram_default(task, backbone, s.seed)[0]
              for task in s.speed_tasks for backbone in s.backbones}
    for model in models.values():
        model.learn(model.n_steps * model.n_envs)
    return models


def buffer_bytes(models: dict[tuple[str, str], Any]) -> dict[str, int]:
    """Bytes each learner's rollout buffer stores per env step (its backbone's memory), by ``"task backbone"``."""
    return {f"{task} {backbone}": model.rollout_buffer.bytes_per_step() for (task, backbone), model in models.items()}


def speed_rounds(s: Settings, models: dict[tuple[str, str], Any]) -> list[dict[str, Any]]:
    """Every (task, backbone) learner once per round, in an order shuffled per round."""
    rows = []
    for round_index in range(s.rounds):
        order = random.Random(s.seed + round_index).sample(list(models), len(models))
        for task, backbone in order:
            row = {"round": round_index, "task": task, "backbone": backbone, **timed_learn(models[task, backbone],
                                                                                         s.steps)}
            print(row, flush=True)
            rows.append(row)
    return rows


def compared(s: Settings) -> list[str]:
    """The backbones measured against the GRU."""
    return [backbone for backbone in s.backbones if backbone != "gru"]


def ratios(rows: list[dict[str, Any]], s: Settings) -> list[dict[str, Any]]:
    """Each backbone's steps per CPU second over the GRU's (``<backbone>_over_gru``), and the same of wall seconds,
    per task and round."""
    speed = {(r["task"], r["round"], r["backbone"]): r for r in rows}
    out = []
    for task in s.speed_tasks:
        for round_index in range(s.rounds):
            gru = speed[task, round_index, "gru"]
            row: dict[str, Any] = {"task": task, "round": round_index}
            for backbone in compared(s):
                other = speed[task, round_index, backbone]
                row[f"{backbone}_over_gru"] = round(other["steps_per_cpu_second"] / gru["steps_per_cpu_second"], 3)
                row[f"{backbone}_over_gru_wall"] = round(other["steps_per_second"] / gru["steps_per_second"], 3)
            out.append(row)
    return out


def score_run(name: str, model: Any, eval_env: Any, s: Settings) -> dict[str, Any]:
    """Train ``model`` for the budget from scratch, then its deterministic score on ``eval_env``."""
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(s.budget)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    returns = evaluate(model, eval_env, s.episodes).returns
    row = {"learner": name, **rates(model.num_timesteps, wall, cpu), "mean_return": round(float(returns.mean()), 3),
           "std_return": round(float(returns.std()), 3), "episodes": len(returns),
           "load_average": round(os.getloadavg()[0], 2)}
    print(row, flush=True)
    return row


def recurrent_ppo(task: str, seed: int) -> tuple[Any, Any]:
    """sb3-contrib's RecurrentPPO with its library defaults on one copy of ``task``, and engram's evaluation
    envs of the task (those of :func:`engram_default`, built the same way)."""
    eval_env = make_envs(build_config(None, {"env": task, "seed": seed}))[1]
    return RecurrentPPO("MlpLstmPolicy", make_vec_env(task, 1, seed=seed), seed=seed), eval_env


def against_recurrent_ppo(s: Settings) -> list[dict[str, Any]]:
    """engram's default GTrXL and RecurrentPPO's defaults at the same budget, per POPGym task."""
    rows = []
    for index, task in enumerate(s.score_tasks):
        runs = [("engram gtrxl (defaults)", partial(engram_default, task, "gtrxl", s.seed)),
                ("RecurrentPPO MlpLstmPolicy (defaults)", partial(recurrent_ppo, task, s.seed))]
        for name, build in runs if index % 2 == 0 else runs[::-1]:
            model, eval_env = build()  # just before training: each run draws only from its own seeding
            rows.append({"task": task, "device": str(model.device), **score_run(name, model, eval_env, s)})
    return rows


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """Medians per (task, backbone), the median and range of each backbone over the GRU per task, and engram over
    RecurrentPPO; each of CPU time (the targets') and of wall time (``_wall``)."""
    s = result["settings"]
    out: dict[str, Any] = {}
    for suffix, rate in (("", "steps_per_cpu_second"), ("_wall", "steps_per_second")):
        out[f"median_steps_per_second{suffix}"] = {
            f"{task} {backbone}": statistics.median(r[rate] for r in result["rounds"]
                                                    if (r["task"], r["backbone"]) == (task, backbone))
            for task in s["speed_tasks"] for backbone in s["backbones"]}
        for backbone in s["backbones"]:
            if backbone == "gru":
                continue
            per_task = {}
            for task in s["speed_tasks"]:
                values = [r[f"{backbone}_over_gru{suffix}"] for r in result["ratios"] if r["task"] == task]
                per_task[task] = {"median": statistics.median(values), "range": [min(values), max(values)]}
            out[f"{backbone}_over_gru{suffix}"] = per_task
    contrib = {}
    for task in s["score_tasks"] if result["recurrent_ppo"] else []:
        engram, other = (next(r for r in result["recurrent_ppo"] if r["task"] == task and r["learner"].startswith(p))
                         for p in ("engram", "RecurrentPPO"))
        contrib[task] = {"speedup": round(other["cpu_s"] / engram["cpu_s"], 2),
                         "speedup_wall": round(other["wall_s"] / engram["wall_s"], 2),
                         "return_difference": round(engram["mean_return"] - other["mean_return"], 3)}
    out["over_recurrent_ppo"] = contrib
    return out


def _met(met: bool) -> str:
    return "met" if met else "**not met**"


def _range(ratio: dict[str, Any]) -> str:
    return f"{ratio['median']:.2f} ({ratio['range'][0]:.2f}–{ratio['range'][1]:.2f})"


def render(result: dict[str, Any]) -> str:
    s, sm = result["settings"], result["summary"]
    title = ("Suite speed: engram's default backbones, and RecurrentPPO's defaults" if result["recurrent_ppo"] else
             "Suite speed: the linear recurrent memories against the GRU")
    lines = [*heading(title, result),
             machine_line(result), "",
             f"One torch thread. Every learner is what `train_rl.py --env TASK --backbone B` builds with every "
             f"default (MemoryPPO, 16 envs, the backbone's default size). {s['rounds']} interleaved rounds, each "
             f"running every learner once (shuffled order) for {s['steps']:,} env steps of `learn` after a warm-up "
             "rollout; steps/s include rollouts and updates. **CPU steps/s**: env steps per second of this "
             "process's CPU time (one thread, envs in-process: the speed on a core of its own), which the ratios "
             "and targets use; **wall steps/s**: per second of wall time, which on this shared machine follows "
             "the other processes' load from second to second. Load: the 1-minute load average after the "
             "measurement.", "", "## Steps/s per round", "",
             "| round | task | backbone | CPU steps/s | wall steps/s | share collecting (wall) | load |",
             "|---:|---|---|---:|---:|---:|---:|"]
    for r in sorted(result["rounds"], key=lambda r: (r["round"], r["task"], r["backbone"])):
        lines.append(f"| {r['round']} | `{r['task']}` | {r['backbone']} | {r['steps_per_cpu_second']:,.0f} | "
                     f"{r['steps_per_second']:,.0f} | {r['collect_share']:.0%} | {r['load_average']:.2f} |")
    lines += ["", "## Over the GRU", "",
              "Median CPU steps/s per backbone; over GRU: median (range) of the per-round ratios of CPU steps/s "
              "(and of wall steps/s); target: GTrXL ≥ 0.5×, each linear recurrent memory ≥ 1×. Bytes/step: what the "
              "rollout buffer stores per env step (`bytes_per_step`: the backbone's per-step record, amortised "
              "window prefix and validity bytes).", "",
              "| task | backbone | CPU steps/s | over GRU per round (CPU) | over GRU (CPU) | over GRU (wall) "
              "| bytes/step | target |",
              "|---|---|---:|---|---|---|---:|---|"]
    for task in s["speed_tasks"]:
        for b in s["backbones"]:
            speed = f"{sm['median_steps_per_second'][f'{task} {b}']:,.0f}"
            size = sm.get("bytes_per_step", {}).get(f"{task} {b}")
            size = "" if size is None else f"{size:,}"
            if b == "gru":
                lines.append(f"| `{task}` | gru | {speed} | | | | {size} | |")
                continue
            per_round = " / ".join(f"{r[f'{b}_over_gru']:.2f}" for r in result["ratios"] if r["task"] == task)
            cpu, wall = sm[f"{b}_over_gru"][task], sm[f"{b}_over_gru_wall"][task]
            target = TARGET_OVER_GRU.get(b)
            verdict = "" if target is None else f"≥ {target:g}×: {_met(cpu['median'] >= target)}"
            lines.append(f"| `{task}` | {b} | {speed} | {per_round} | {_range(cpu)} | {_range(wall)} | {size} "
                         f"| {verdict} |")
    if not result["recurrent_ppo"]:
        return "\n".join(lines) + "\n"
    lines += ["", f"## Against sb3-contrib's RecurrentPPO, {s['budget']:,} env steps (target ≥ "
              f"{TARGET_OVER_RECURRENT_PPO:g}× the speed, learning at least as well)", "",
              "`RecurrentPPO(\"MlpLstmPolicy\", envs.make_vec_env(task, 1, seed=0), seed=0)`: the library's defaults "
              "(one env, n_steps 128, batch 128, 10 epochs, lr 3e-4, separate actor and critic LSTMs of 256); "
              "engram: `train_rl.py --env task --backbone gtrxl` defaults. Times: `learn` alone (no periodic "
              f"evaluation). Return: deterministic, mean (std) over {s['episodes']} episodes on 4 evaluation envs "
              "seeded 10,000; POPGym returns lie in [−1, 1]. One seed each.", "",
              "| task | learner | env steps | CPU s | wall s | CPU steps/s | return | load |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["recurrent_ppo"]:
        lines.append(f"| `{r['task']}` | {r['learner']} | {r['steps']:,} | {r['cpu_s']:,.1f} | {r['wall_s']:,.1f} | "
                     f"{r['steps_per_cpu_second']:,.0f} | {r['mean_return']:.2f} ({r['std_return']:.2f}) | "
                     f"{r['load_average']:.2f} |")
    lines += ["", "| task | engram's speed-up (CPU) | (wall) | return, engram − RecurrentPPO | target |",
              "|---|---:|---:|---:|---|"]
    for task, c in sm["over_recurrent_ppo"].items():
        met = c["speedup"] >= TARGET_OVER_RECURRENT_PPO and c["return_difference"] >= 0
        lines.append(f"| `{task}` | {c['speedup']:.2f}× | {c['speedup_wall']:.2f}× | {c['return_difference']:+.2f} | "
                     f"{_met(met)} |")
    return "\n".join(lines) + "\n"


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: short runs, one round, nothing written")
    parser.add_argument("--rounds", type=positive, default=Settings.rounds, help="interleaved speed rounds")
    parser.add_argument("--steps", type=positive, default=Settings.steps, help="env steps per speed measurement")
    parser.add_argument("--budget", type=positive, default=Settings.budget,
                        help="env steps of each run against RecurrentPPO")
    parser.add_argument("--recurrent", action="store_true",
                        help="the linear recurrent memories against the GRU on two POPGym tasks and T-Maze-20, with "
                             "their buffer bytes per step; no RecurrentPPO part")
    parser.add_argument("--name", help="results file name (default: suite_speed, or recurrent_memories_speed with "
                                       "--recurrent)")
    args = parser.parse_args()
    chosen = {"speed_tasks": RECURRENT_TASKS, "backbones": RECURRENT_MEMORIES,
              "against_recurrent_ppo": False} if args.recurrent else {}
    settings = Settings(rounds=args.rounds, steps=args.steps, budget=args.budget, **chosen)
    if args.quick:
        settings = Settings(rounds=1, steps=2048, budget=2048, episodes=8, **chosen)
    torch.set_num_threads(settings.threads)
    result: dict[str, Any] = {**provenance(), "machine": machine_info(), "settings": asdict(settings)}
    models = learners(settings)
    sizes = buffer_bytes(models)
    result["rounds"] = speed_rounds(settings, models)
    result["ratios"] = ratios(result["rounds"], settings)
    result["recurrent_ppo"] = against_recurrent_ppo(settings) if settings.against_recurrent_ppo else []
    result["summary"] = {**summary(result), "bytes_per_step": sizes}
    if args.quick:
        print(render({**result, "machine": {**result["machine"], "load_average_at_end": list(os.getloadavg())}}))
    else:
        write_results(args.name or ("recurrent_memories_speed" if args.recurrent else "suite_speed"), result, render)


if __name__ == "__main__":
    main()
