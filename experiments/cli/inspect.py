"""``train_rl.py inspect RUN_DIR_OR_MODEL [--episodes N] [--out DIR]``: what a trained agent's memory reads.

Plays episodes with the agent (the most probable action, seeded as the run's evaluation) and, for every backbone,
draws the gradient saliency of each decision over the episode's observations, ``‖∂ logit(a_t) / ∂ o_k‖`` for
``k ≤ t`` (:mod:`experiments.saliency`), as a heat map of decision step ``t`` against observed step ``k``, each
row scaled to its largest value at an earlier step, with the episode's first step and the steps whose reward is not
0 marked. For
attention backbones it also draws the attention weights of every layer and head over the episode. The
**recall distance** of a step is its saliency-weighted mean of ``t − k``: how far back its decision reaches.
Writes ``saliency_<i>.png``, ``attention_<i>.png`` and ``inspect.json`` (every map, action, reward and distance)
into a new or empty directory: ``--out``, or ``RUN_DIR/inspect`` (``inspect-2``, ... when an earlier inspect holds
it; an earlier output is never overwritten). The output is whole or absent: an inspect that fails (a full disk, an
env that breaks) or is interrupted removes what it wrote::

    python train_rl.py inspect runs/TMaze-v0__ppo-gtrxl__0 --episodes 4 --out inspect/gtrxl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from experiments.cli.parser import OneLineParser, add_env_options, first_seed, program, whole
from experiments.exits import error_line


def make_parser() -> argparse.ArgumentParser:
    """The parser of `train_rl.py inspect`."""
    parser = OneLineParser(prog=f"{program()} inspect", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="RUN_DIR_OR_MODEL",
                        help="a run directory (its final model.zip) or a saved .zip (with --env when no run's "
                             "config.yaml is beside it)")
    parser.add_argument("--episodes", "-n", type=whole, default=4, help="episodes to play (default: %(default)s)")
    parser.add_argument("--out", "-o", help="a new or empty directory to write to (default: RUN_DIR/inspect, or "
                                            "inspect-2, inspect-3, ... when an earlier inspect holds it)")
    parser.add_argument("--seed", type=whole, help="seed of the first episode, the next ones counting up, at most "
                                                 "2**32 - N with --episodes N (default: the run's evaluation seed, "
                                                 "its seed + 10000)")
    parser.add_argument("--stochastic", action="store_true", help="sample actions instead of the most probable")
    parser.add_argument("--max-steps", type=whole, default=500,
                        help="steps an episode is cut at (the saliency map grows as its square; default: %(default)s)")
    parser.add_argument("--threads", type=whole, default=1,
                        help="torch CPU threads, 0: every core (default: %(default)s)")
    add_env_options(parser, "play on")
    return parser


def _check(options: argparse.Namespace) -> None:
    """`ConfigError` naming the flag for a count below one, more threads than cores, a seed numpy refuses for an
    episode (`first_seed`), an output directory that is empty, cannot be written or holds files, and environment
    options that are not valid (`check_env_options`)."""
    from envs.rules import Range
    from experiments.cli.parser import check_env_options
    from experiments.config import ConfigError
    from experiments.rules import Threads
    from experiments.writable import check_output

    Threads().check("--threads", options.threads)  # as a run's threads
    for flag in ("episodes", "max_steps"):
        Range(1, integer=True).check(f"--{flag.replace('_', '-')}", getattr(options, flag))
    if options.seed is not None:
        first_seed(options.seed, 0, options.episodes, "--episodes")
    if options.out is not None:
        check_output("--out", options.out, directory=True)
        out = Path(options.out)
        if out.is_dir() and any(out.iterdir()):
            raise ConfigError(f"--out {options.out!r}: already holds files (an earlier output is never overwritten); "
                              "give a new or empty directory")
    check_env_options(options)


def play(agent: Any, seed: int, deterministic: bool, max_steps: int) -> dict[str, Any]:
    """One episode on a gymnasium copy of the run's env seeded `seed`: observations, actions and rewards."""
    from envs import make_env
    from experiments.replay import act, env_action

    config = agent.config
    env = make_env(config.env, env_wrapper=config.env_wrapper, gym_packages=config.gym_packages,
                   **config.env_kwargs)
    observations, actions, rewards = [], [], []
    try:
        observation, _ = env.reset(seed=seed)
        state, start, over = None, np.ones(1, dtype=bool), False
        while not over and len(actions) < max_steps:
            action, state = act(agent.model, observation, state, start, deterministic)
            observations.append(observation)
            actions.append(action)
            observation, reward, terminated, truncated, _ = env.step(env_action(env.action_space, action))
            rewards.append(float(reward))
            start, over = np.zeros(1, dtype=bool), terminated or truncated
    finally:
        env.close()
    return {"seed": seed, "observations": observations, "actions": np.asarray(actions), "rewards": rewards,
            "cut": not over}


def events(rewards: list[float]) -> list[int]:
    """The steps marked on the maps: the first one and those whose reward is not 0."""
    return sorted({0, *(t for t, r in enumerate(rewards) if r != 0)})


def memory_peak(row: np.ndarray, t: int) -> int | None:
    """The earlier step `k < t` a decision's saliency `row` is largest at (`None`: it reads none of them)."""
    earlier = row[:t]
    return int(earlier.argmax()) if earlier.size and earlier.max() > 0 else None


EVENT_KINDS = (("first step", "cyan"), ("reward > 0", "lime"), ("reward < 0", "red"))


def _mark(axes: Any, marked: list[int], rewards: list[float]) -> None:
    """Ticks on both edges at the marked steps, by kind (with lines across the map when there are few)."""
    kinds = {"first step": [0], "reward > 0": [t for t in marked if rewards[t] > 0],
             "reward < 0": [t for t in marked if rewards[t] < 0]}
    edge = -0.5
    for name, color in EVENT_KINDS:
        steps = kinds[name]
        if not steps:
            continue
        axes.plot(steps, [edge] * len(steps), "v", color=color, ms=5, clip_on=False, label=name)
        axes.plot([edge] * len(steps), steps, ">", color=color, ms=5, clip_on=False)
        if len(marked) <= 4:
            for step in steps:
                axes.axvline(step, color=color, lw=0.7, ls="--")


def row_scaled(S: np.ndarray) -> np.ndarray:
    """Each row of `S` over its largest value at an earlier step (the memory's part; the present step, which often
    outweighs them, is clipped to 1), or over its own value where no earlier step counts."""
    earlier = np.tril(S, -1).max(axis=1, keepdims=True)
    scale = np.where(earlier > 0, earlier, S.max(axis=1, keepdims=True))
    return np.clip(np.divide(S, scale, out=np.zeros_like(S), where=scale > 0), 0, 1)


def saliency_figure(S: np.ndarray, marked: list[int], rewards: list[float], title: str) -> Any:
    """The `t × k` heat map of one episode (`row_scaled`)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    T = S.shape[0]
    figure = Figure(figsize=(5.0, 4.2))
    axes = figure.subplots()
    image = axes.imshow(row_scaled(S), cmap="magma", origin="upper", extent=(-0.5, T - 0.5, T - 0.5, -0.5),
                        interpolation="nearest")
    figure.colorbar(image, ax=axes, label="saliency, row scaled (largest at k < t = 1)")
    _mark(axes, marked, rewards)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set(xlabel="observed step k", ylabel="decision step t")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=6, loc="upper right", framealpha=0.6)
    return figure


def attention_figure(maps: list[Any], marked: list[int], title: str) -> Any:
    """One panel per layer call and head: the weights of query step `t` (rows) on key step `k`."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    shown = [m for m in maps if m.weights is not None]
    heads = max(m.weights.shape[0] for m in shown)
    figure = Figure(figsize=(2.4 * heads + 0.6, 2.4 * len(shown) + 0.6))
    panels = figure.subplots(len(shown), heads, squeeze=False)
    for row, record in zip(panels, shown, strict=True):
        for head, axes in enumerate(row):
            if head >= record.weights.shape[0]:
                axes.axis("off")
                continue
            axes.imshow(record.weights[head].cpu().numpy(), cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
            if len(marked) <= 4:
                for step in marked:
                    axes.axvline(step, color="white", lw=0.5, ls="--")
            axes.set_title(f"{record.layer}, head {head}", fontsize=7)
            axes.set_xlabel("key step k", fontsize=6)
            axes.set_ylabel("query step t", fontsize=6)
            axes.xaxis.set_major_locator(MaxNLocator(integer=True))
            axes.yaxis.set_major_locator(MaxNLocator(integer=True))
            axes.tick_params(labelsize=6)
    figure.suptitle(title, fontsize=9)
    return figure


FIGURES = ("saliency", "attention")
"""the figures of episode i: `saliency_i.png`, and `attention_i.png` for a backbone with attention"""


def inspect_episode(agent: Any, episode: dict[str, Any], index: int, out: Path) -> dict[str, Any]:
    """The maps of one played episode: figures written to `out`, and the record for `inspect.json`."""
    from envs.atomic import save_figure
    from experiments.saliency import episode_attention, recall_distance, saliency

    policy, name = agent.model.policy, agent.config.backbone
    S = saliency(policy, episode["observations"], episode["actions"])
    distance = recall_distance(S)
    marked, rewards = events(episode["rewards"]), episode["rewards"]
    T = len(rewards)
    decisions = [t for t in marked if rewards[t] != 0] or [T - 1]
    reached = [distance[t] for t in decisions if not np.isnan(distance[t])]
    reach = ("none" if not reached else f"{reached[0]:.1f}" if len(decisions) == 1
             else f"{np.mean(reached):.1f} (mean of {len(decisions)} decisions)")
    title = f"{name}, episode {index}: return {sum(rewards):.2f}, recall distance {reach}"
    figures = {"saliency": f"{FIGURES[0]}_{index}.png"}
    save_figure(saliency_figure(S, marked, rewards, title), out / figures["saliency"])
    maps = episode_attention(policy, episode["observations"])
    if any(m.weights is not None for m in maps):
        figures["attention"] = f"{FIGURES[1]}_{index}.png"
        save_figure(attention_figure(maps, marked, f"{name} attention, episode {index}"), out / figures["attention"])
    return {"seed": episode["seed"], "length": T, "cut_at_max_steps": episode["cut"], "return": sum(rewards),
            "actions": episode["actions"].tolist(), "rewards": rewards, "events": marked,
            "decisions": [{"step": t, "memory_peak": memory_peak(S[t], t), "recall_distance": _number(distance[t])}
                          for t in decisions],
            "recall_distance": [_number(d) for d in distance], "saliency": np.round(S, 8).tolist(),
            "attention": [{"layer": m.layer, "weights": np.round(m.weights.cpu().numpy(), 6).tolist()}
                          if m.weights is not None else {"layer": m.layer, "left_out": m.why} for m in maps],
            "figures": figures}


def reads(decisions: list[dict[str, Any]]) -> str:
    """What an episode's decisions read, in words: the earlier step each reads most, as a lag behind it."""
    if len(decisions) == 1:
        (d,) = decisions
        if d["memory_peak"] is None:  # the episode's first step, or a decision no earlier step moves
            return f"the decision at step {d['step']} reads no earlier step"
        return (f"the decision at step {d['step']} reads step {d['memory_peak']} most of the earlier steps "
                f"(recall distance {d['recall_distance']})")
    lags = Counter(d["step"] - d["memory_peak"] for d in decisions if d["memory_peak"] is not None)
    distances = [d["recall_distance"] for d in decisions if d["recall_distance"] is not None]
    common = (f"is most often {lags.most_common(1)[0][0]} back ({lags.most_common(1)[0][1]} of {len(decisions)})"
              if lags else "is none")
    return (f"{len(decisions)} decisions, the earlier step each reads most {common}, mean recall distance "
            f"{_mean(distances)}")


def _number(value: float) -> float | None:
    return None if np.isnan(value) else round(float(value), 4)


def main(argv: list[str]) -> int:
    """Play, map and write; exit status 2 on bad input (one line)."""
    options = make_parser().parse_args(argv)
    from experiments.config import ConfigError

    try:
        _check(options)
    except ConfigError as error:
        print(error_line(error), file=sys.stderr)
        return 2
    import torch

    from envs.atomic import new_directory, write_atomic
    from experiments.replay import check_agent_env, load_agent_with_env
    from experiments.training import torch_threads

    torch.set_num_threads(torch_threads(options.threads))
    try:
        agent = load_agent_with_env(options, "cpu")
        check_agent_env(agent)
        seed = first_seed(options.seed, agent.eval_seed, options.episodes, "--episodes")
    except (ConfigError, TypeError) as error:
        print(error_line(error), file=sys.stderr)
        return 2
    wanted = Path(options.out) if options.out is not None else agent.directory / "inspect"
    records: list[dict[str, Any]] = []
    with new_directory(wanted) as out:  # this command's alone while it writes
        try:
            for index in range(options.episodes):
                episode = play(agent, seed + index, not options.stochastic, options.max_steps)
                record = inspect_episode(agent, episode, index, out)
                records.append(record)
                print(f"episode {index} (seed {record['seed']}): {record['length']} steps, return "
                      f"{record['return']:.2f}; {reads(record['decisions'])}")
            summary = {"mean_recall_distance": _mean(d for r in records for d in r["recall_distance"]),
                       "mean_recall_distance_at_decisions": _mean(d["recall_distance"] for r in records
                                                                  for d in r["decisions"])}
            result = {"model": str(agent.model_path), "backbone": agent.config.backbone, "env": agent.config.env,
                      "env_kwargs": agent.config.env_kwargs, "deterministic": not options.stochastic,
                      "saliency": "S[t][k] = ||d score(a_t) / d o_k||_2, 0 for k > t; score: the logit of the "
                                  "action taken, or for continuous actions the Gaussian's sum_i mu_i / sigma_i",
                      "decisions": "steps whose reward is not 0 (else the last step)", "summary": summary,
                      "episodes": records}
            write_atomic(out / "inspect.json", json.dumps(result, indent=1))
        except BaseException:  # the figures written so far go again: an output is whole or absent
            for index in range(len(records) + 1):
                for kind in FIGURES:
                    (out / f"{kind}_{index}.png").unlink(missing_ok=True)
            raise
    print(f"{out}: inspect.json and the figures of {len(records)} episode(s); mean recall distance "
          f"{summary['mean_recall_distance']} (at decisions {summary['mean_recall_distance_at_decisions']})")
    return 0


def _mean(values: Any) -> float | None:
    kept = [v for v in values if v is not None]
    return round(float(np.mean(kept)), 4) if kept else None
