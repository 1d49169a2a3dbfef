"""Env steps per second: numpy-batched engram tasks vs SB3 DummyVecEnv over their single-copy views.

For every engram task and n_envs in {1, 16, 256}, random actions, the batched ``BatchedVecEnv``
and ``DummyVecEnv([task.as_env] * n)`` are measured alternately (interleaved repeats, so
machine noise hits both alike); the speed-up is the median over repeats of the per-repeat
ratio. A POPGym env (pure Python) through DummyVecEnv is measured alongside as a reference
for what a hand-written single env costs. Then the MiniGrid adapter is compared with raw
MiniGrid stepping (symbolic and CleanRL's RGB set-up), single env and 16-env DummyVecEnv.

Usage (from the repository root)::

    .venv/bin/python benchmarks/env_throughput.py            # writes benchmarks/results/env_throughput.{json,md}
    .venv/bin/python benchmarks/env_throughput.py --quick    # short smoke run, prints only
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from common import RESULTS, heading, machine_info, machine_line, provenance, write_results

import envs
from envs.vec_env import BatchedVecEnv

N_ENVS = (1, 16, 256)
MINIGRID_ID = "MiniGrid-MemoryS9-v0"
POPGYM_REFERENCE = "popgym-RepeatPreviousEasy-v0"


def vec_steps_per_second(venv: Any, seconds: float, seed: int = 0) -> float:
    """Env steps (copies x calls) per second of ``venv.step`` with uniform random Discrete actions."""
    actions = np.random.default_rng(seed).integers(0, venv.action_space.n, size=(1024, venv.num_envs))
    venv.reset()
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(8):
            venv.step(actions[calls % 1024])
            calls += 1
    return calls * venv.num_envs / elapsed


def env_steps_per_second(env: gym.Env, seconds: float, seed: int = 0) -> float:
    """Steps per second of one gymnasium env under random actions, resetting at episode ends."""
    actions = np.random.default_rng(seed).integers(0, env.action_space.n, size=1024)
    env.reset(seed=seed)
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(8):
            _, _, terminated, truncated, _ = env.step(actions[steps % 1024])
            steps += 1
            if terminated or truncated:
                env.reset()
    return steps / elapsed


def interleaved(contenders: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run each measurement ``repeats`` times, alternating between contenders, after one discarded warm-up."""
    for measure in contenders.values():
        measure()
    results: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, measure in contenders.items():
            results[name].append(measure())
    return results


def batched_vs_dummy(seconds: float, repeats: int) -> list[dict[str, Any]]:
    from stable_baselines3.common.vec_env import DummyVecEnv

    rows = []
    for env_id, task_cls in envs.ENV_IDS.items():
        for n in N_ENVS:
            batched = BatchedVecEnv(task_cls(n_copies=n))
            dummy = DummyVecEnv([task_cls.as_env for _ in range(n)])
            runs = interleaved({"batched": lambda v=batched: vec_steps_per_second(v, seconds),
                                "dummy": lambda v=dummy: vec_steps_per_second(v, seconds)}, repeats)
            ratios = [b / d for b, d in zip(runs["batched"], runs["dummy"], strict=True)]
            rows.append({
                "env_id": env_id, "n_envs": n, "horizon": _horizon(batched.task),
                "batched_steps_per_s": statistics.median(runs["batched"]),
                "dummy_steps_per_s": statistics.median(runs["dummy"]),
                "speedup": statistics.median(ratios), "speedup_min": min(ratios), "speedup_max": max(ratios),
            })
            print(f"{env_id:18s} n={n:4d}  batched {rows[-1]['batched_steps_per_s']:>12,.0f}/s  "
                  f"dummy {rows[-1]['dummy_steps_per_s']:>9,.0f}/s  x{rows[-1]['speedup']:.1f}", flush=True)
    popgym = envs.make_vec_env(POPGYM_REFERENCE, max(N_ENVS)).venv
    reference = statistics.median(interleaved({"p": lambda: vec_steps_per_second(popgym, seconds)}, repeats)["p"])
    rows.append({"env_id": POPGYM_REFERENCE, "n_envs": max(N_ENVS), "horizon": "k=4, 51 steps",
                 "batched_steps_per_s": None, "dummy_steps_per_s": reference, "speedup": None,
                 "speedup_min": None, "speedup_max": None})
    print(f"{POPGYM_REFERENCE} (pure-Python reference) n={max(N_ENVS)}: {reference:,.0f}/s", flush=True)
    return rows


def _horizon(task: envs.BatchedTask) -> str:
    params = {"k": getattr(task, "k", None), "length": getattr(task, "length", None)}
    return ", ".join(f"{k}={v}" for k, v in params.items() if v is not None) + f"; {task.episode_length} steps"


def minigrid_overhead(seconds: float, repeats: int) -> list[dict[str, Any]]:
    """The adapters (symbolic one-hot, or CleanRL's RGB stack, + is_success) against the bare MiniGrid env."""
    import minigrid  # noqa: F401
    from minigrid.wrappers import ImgObsWrapper, RGBImgPartialObsWrapper
    from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

    def raw_symbolic() -> gym.Env:
        return ImgObsWrapper(gym.make(MINIGRID_ID))

    def raw_rgb() -> gym.Env:
        env = gym.make(MINIGRID_ID, agent_view_size=3, tile_size=28)
        return gym.wrappers.TimeLimit(ImgObsWrapper(RGBImgPartialObsWrapper(env, tile_size=28)), 96)

    rgb_kwargs = {"obs": "rgb", "agent_view_size": 3, "tile_size": 28, "max_episode_steps": 96}
    cases = [
        ("symbolic, 1 env", lambda: env_steps_per_second(raw_symbolic(), seconds),
         lambda: env_steps_per_second(envs.make_env(MINIGRID_ID), seconds)),
        ("rgb 84x84 (CleanRL), 1 env", lambda: env_steps_per_second(raw_rgb(), seconds),
         lambda: env_steps_per_second(envs.make_env(MINIGRID_ID, **rgb_kwargs), seconds)),
        ("symbolic, 16 envs (DummyVecEnv + VecMonitor)",
         lambda: vec_steps_per_second(VecMonitor(DummyVecEnv([raw_symbolic] * 16)), seconds),
         lambda: vec_steps_per_second(envs.make_vec_env(MINIGRID_ID, 16, seed=0), seconds)),
    ]
    rows = []
    for name, raw, adapted in cases:
        runs = interleaved({"raw": raw, "adapted": adapted}, repeats)
        ratios = [a / r for a, r in zip(runs["adapted"], runs["raw"], strict=True)]
        rows.append({"case": name, "raw_steps_per_s": statistics.median(runs["raw"]),
                     "adapter_steps_per_s": statistics.median(runs["adapted"]),
                     "overhead_pct": 100.0 * (1.0 - statistics.median(ratios))})
        print(f"MiniGrid {name:45s} raw {rows[-1]['raw_steps_per_s']:>8,.0f}/s  "
              f"adapter {rows[-1]['adapter_steps_per_s']:>8,.0f}/s  overhead {rows[-1]['overhead_pct']:.1f}%",
              flush=True)
    return rows


def machine() -> dict[str, Any]:
    """:func:`common.machine_info` plus the CPUs this process may use and the MiniGrid version."""
    import minigrid

    return {**machine_info(), "minigrid": minigrid.__version__,
            "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}


def to_markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        *heading("Env throughput: numpy-batched tasks vs DummyVecEnv", report),
        f"{machine_line(report)} · wall time {report['wall_time_s']:.0f} s",
        "",
        f"- Machine: {m['platform']}, {m['cpus_usable']} of {m['cpu_count']} CPUs usable (the machine is shared)",
        f"- Python {m['python']}, numpy {m['numpy']}, gymnasium {m['gymnasium']}, "
        f"SB3 {m['stable_baselines3']}, minigrid {m['minigrid']}",
        f"- Method: random actions, default horizons; each cell is the median of {report['repeats']} "
        f"interleaved repeats of {report['seconds_per_measurement']} s; speed-up = median of per-repeat ratios "
        "(min-max in brackets). Neither side is wrapped in VecMonitor. The DummyVecEnv side steps "
        "`SingleCopyEnv` views, i.e. the same numpy code on one copy.",
        "",
        "| task | horizon | n_envs | batched steps/s | DummyVecEnv steps/s | speed-up |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in report["batched_vs_dummy"]:
        if row["speedup"] is None:
            continue
        lines.append(f"| {row['env_id']} | {row['horizon']} | {row['n_envs']} | {row['batched_steps_per_s']:,.0f} | "
                     f"{row['dummy_steps_per_s']:,.0f} | x{row['speedup']:.1f} "
                     f"({row['speedup_min']:.1f}-{row['speedup_max']:.1f}) |")
    reference = [r for r in report["batched_vs_dummy"] if r["speedup"] is None]
    batched_256 = [r["batched_steps_per_s"] for r in report["batched_vs_dummy"]
                   if r["n_envs"] == 256 and r["speedup"] is not None]
    for row in reference:
        lines += ["", f"Reference, a pure-Python env: `{row['env_id']}` through DummyVecEnv, "
                      f"n_envs={row['n_envs']}: {row['dummy_steps_per_s']:,.0f} steps/s. "
                      f"The batched tasks at 256 copies run x{min(batched_256) / row['dummy_steps_per_s']:.0f}-"
                      f"x{max(batched_256) / row['dummy_steps_per_s']:.0f} faster than it (a different task, so only "
                      "indicative: the single-copy views run numpy on one copy, slower than plain Python)."]
    at_256 = [r["speedup"] for r in report["batched_vs_dummy"] if r["n_envs"] == 256 and r["speedup"] is not None]
    lines += ["", f"Target >= x20 at 256 copies: smallest speed-up at 256 is x{min(at_256):.1f}.", "",
              f"## MiniGrid adapter overhead ({MINIGRID_ID}, random actions)", "",
              "| case | raw MiniGrid steps/s | engram adapter steps/s | overhead |", "|---|---:|---:|---:|"]
    for row in report["minigrid"]:
        lines.append(f"| {row['case']} | {row['raw_steps_per_s']:,.0f} | {row['adapter_steps_per_s']:,.0f} | "
                     f"{row['overhead_pct']:.1f} % |")
    lines += ["", "Overhead = 1 - adapter/raw (median of per-repeat ratios); a negative value means the adapter "
              "measured faster, i.e. the difference is within the noise.", "",
              "Raw = `ImgObsWrapper(gym.make(id))` (uint8 7x7x3) for symbolic; CleanRL's "
              "`TimeLimit(ImgObsWrapper(RGBImgPartialObsWrapper(gym.make(id, agent_view_size=3, tile_size=28), 28)), "
              "96)` "
              "for RGB. Adapter = `envs.make_env` / `envs.make_vec_env` (one-hot float32 view or the same RGB stack, "
              "plus `is_success`).", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short measurements, print only (unless --output)")
    parser.add_argument("--output", default=None,
                        help="path prefix of the .json/.md results (default benchmarks/results/env_throughput)")
    args = parser.parse_args()
    seconds, repeats = (0.05, 2) if args.quick else (0.4, 5)
    output = Path(args.output) if args.output else (None if args.quick else RESULTS / "env_throughput")

    started = time.perf_counter()
    report: dict[str, Any] = {**provenance(), "machine": machine(),
                              "seconds_per_measurement": seconds, "repeats": repeats}
    report["batched_vs_dummy"] = batched_vs_dummy(seconds, repeats)
    report["minigrid"] = minigrid_overhead(seconds, repeats)
    report["wall_time_s"] = time.perf_counter() - started
    if output:
        write_results(output.name, report, to_markdown, output.parent)


if __name__ == "__main__":
    main()
