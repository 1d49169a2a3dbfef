"""engram against sb3-contrib's RecurrentPPO on any task, at the same budget and with the same PPO settings.

For each seed, the engram run is exactly what ``train_rl.py --config CONFIG --seed S`` trains (the run core,
one torch thread, written under ``--log-dir``). RecurrentPPO gets the same environment (``envs.make_vec_env``
with the config's env spec, kwargs and wrappers, the same number of copies and copy seeds), the same PPO
settings (``n_steps``, ``batch_size``, ``n_epochs``, ``gamma``, ``gae_lambda``, ``learning_rate``,
``clip_range``, ``ent_coef``, ``vf_coef``, ``max_grad_norm``), the config's ``net_arch``, activation and
``ortho_init``, and an LSTM of the backbone's width for actor and critic; ``--contrib-kwargs`` adds or replaces
RecurrentPPO arguments (e.g. rl-zoo3's gSDE: ``'{"use_sde": true, "sde_sample_freq": 4}'``). Both are scored
the same way: the deterministic policy's mean return over ``--episodes`` episodes on the run's evaluation envs
(``n_eval_envs`` copies seeded ``seed + 10,000``). Learners alternate which trains first from seed to seed::

    .venv/bin/python notebooks/recurrent_ppo_compare.py --config configs/pendulum_no_velocity.yaml \\
        --seeds 0 1 2 --name pendulum_no_velocity
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from common import RESULTS, heading, machine_info, machine_line, provenance, write_results
from sb3_contrib import RecurrentPPO

from experiments.config import RunConfig, algo_defaults, build_config, parse_value, plain
from experiments.evaluation import evaluate
from experiments.training import EVAL_SEED_OFFSET, make_run_env, train
from experiments.validation import validate
from policies.policy_options import ACTIVATIONS

SHARED_PPO = ("n_steps", "batch_size", "n_epochs", "gamma", "gae_lambda", "learning_rate", "clip_range", "ent_coef",
              "vf_coef", "max_grad_norm")
"""the PPO settings both learners take with the same meaning"""


def contrib_learner(config: RunConfig, extra: dict[str, Any]) -> Any:
    """RecurrentPPO on the config's environment with the config's PPO settings and policy options."""
    ppo = {**algo_defaults("ppo"), **config.algo_options()}
    policy = config.policy
    width = config.backbone_options().get("d_model") or config.backbone_options().get("hidden_size") or 64
    policy_kwargs = {"lstm_hidden_size": int(width), "enable_critic_lstm": True,
                     "ortho_init": policy.get("ortho_init", True),
                     "activation_fn": ACTIVATIONS[policy.get("activation_fn", "tanh")]}
    if policy.get("net_arch") is not None:
        policy_kwargs["net_arch"] = policy["net_arch"]
    env = make_run_env(config, config.n_envs, config.seed)
    kwargs = {key: ppo[key] for key in SHARED_PPO}
    return RecurrentPPO("MlpLstmPolicy", env, seed=config.seed, device=config.device,
                        policy_kwargs=policy_kwargs, **{**kwargs, **extra})


def score(model: Any, config: RunConfig, episodes: int) -> dict[str, float]:
    """The deterministic mean and std of the return on the run's evaluation envs."""
    env = make_run_env(config, config.n_eval_envs, config.seed + EVAL_SEED_OFFSET)
    try:
        returns = evaluate(model, env, episodes).returns
    finally:
        env.close()
    return {"mean_return": round(float(returns.mean()), 2), "std_return": round(float(returns.std()), 2)}


def run_engram(config: RunConfig, episodes: int) -> dict[str, Any]:
    from agents import ALGOS

    wall, cpu = time.perf_counter(), time.process_time()
    summary = train(config)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    model = ALGOS[config.algo].load(Path(config.log_dir) / config.run_name() / "model.zip", device=config.device)
    return {"learner": f"engram {config.backbone}", "seed": config.seed, "steps": summary["env_steps"],
            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), **score(model, config, episodes)}


def run_contrib(config: RunConfig, extra: dict[str, Any], episodes: int) -> dict[str, Any]:
    model = contrib_learner(config, extra)
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(config.total_timesteps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"learner": "RecurrentPPO", "seed": config.seed, "steps": int(model.num_timesteps), "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), **score(model, config, episodes)}


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per learner: mean and min/max of the seeds' returns, and the mean CPU seconds."""
    out = {}
    for learner in dict.fromkeys(row["learner"] for row in rows):
        mine = [row for row in rows if row["learner"] == learner]
        returns = [row["mean_return"] for row in mine]
        out[learner] = {"mean_return": round(statistics.mean(returns), 1), "min": min(returns), "max": max(returns),
                        "cpu_s": round(statistics.mean(row["cpu_s"] for row in mine), 1)}
    return out


def render(result: dict[str, Any]) -> str:
    lines = [*heading(f"engram against RecurrentPPO: {result['task']}", result), machine_line(result), "",
             f"Budget {result['budget']:,} env steps per run, one torch thread, seeds {result['seeds']}. engram runs "
             f"`{result['config']}`; RecurrentPPO takes the same env, PPO settings and policy options"
             + (f", plus `{json.dumps(result['contrib_kwargs'])}`" if result["contrib_kwargs"] else "")
             + f". Score: the deterministic policy's mean return over {result['episodes']} episodes on the run's "
             "evaluation envs.", "", "| learner | seed | return (std) | CPU s | wall s |", "|---|---:|---:|---:|---:|"]
    for row in result["runs"]:
        lines.append(f"| {row['learner']} | {row['seed']} | {row['mean_return']:.1f} ({row['std_return']:.1f}) | "
                     f"{row['cpu_s']:.0f} | {row['wall_s']:.0f} |")
    lines += ["", "| learner | mean return over seeds | worst seed | best seed | mean CPU s |",
              "|---|---:|---:|---:|---:|"]
    for learner, s in result["summary"].items():
        lines.append(f"| {learner} | {s['mean_return']:.1f} | {s['min']:.1f} | {s['max']:.1f} | {s['cpu_s']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the engram run configuration (a YAML file)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=20, help="evaluation episodes per run")
    parser.add_argument("--contrib-kwargs", type=parse_value, default={}, help="RecurrentPPO arguments, as a mapping")
    parser.add_argument("--log-dir", default="runs/recurrent_ppo_compare", help="where the engram runs are written")
    parser.add_argument("--name", required=True, help="results file name (benchmarks/results/<name>.{json,md})")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for index, seed in enumerate(args.seeds):
        config = build_config(args.config, {"seed": seed, "log_dir": args.log_dir, "threads": 1})
        validate(config)
        runs = [lambda c=config: run_engram(c, args.episodes),
                lambda c=config: run_contrib(c, args.contrib_kwargs, args.episodes)]
        for run in runs if index % 2 == 0 else runs[::-1]:
            rows.append(run())
            print(rows[-1], flush=True)
    base = build_config(args.config)
    result = {**provenance(), "machine": machine_info(), "config": args.config, "task": base.env
              + (f" + {plain(base.env_wrapper)}" if base.env_wrapper else ""), "budget": base.total_timesteps,
              "seeds": args.seeds, "episodes": args.episodes, "contrib_kwargs": args.contrib_kwargs, "runs": rows,
              "summary": summary(rows)}
    write_results(args.name, result, render, args.out)


if __name__ == "__main__":
    main()
