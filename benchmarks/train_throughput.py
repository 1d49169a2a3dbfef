"""Training throughput and buffer memory: MemoryPPO against sb3-contrib's RecurrentPPO.

Every contender trains on the same task with the same ``n_envs``, ``n_steps``, ``batch_size``,
``n_epochs`` and hidden size (128). They are measured alternately, round after round, in one
process (the machine is shared and noisy: the ratios within a round are what count). Each
measurement is ``learn`` over ``rollouts`` rollouts after a warm-up rollout; env steps per
second include collection and updates, and the share spent in collection is reported.

Buffer bytes per stored env step: the memory state a learner keeps per step for training —
MemoryPPO's window prefix plus one record per step (:mod:`agents.buffer`) against
RecurrentPPO's four per-step LSTM state arrays — plus, for reference, what storing the full
window per step would cost.

Usage::

    .venv/bin/python benchmarks/train_throughput.py            # a few minutes on 2 cores
    .venv/bin/python benchmarks/train_throughput.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from common import heading, machine_info, machine_line, provenance, write_results
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback

from agents import MemoryPPO
from envs import make_vec_env
from policies import BACKBONES


@dataclass
class Settings:
    env: str = "TMaze-v0"
    length: int = 30
    n_envs: int = 16
    n_steps: int = 128
    batch_size: int = 512
    n_epochs: int = 4
    hidden: int = 128
    memory_length: int = 64
    segment_length: int = 16
    rollouts: int = 3
    rounds: int = 5
    threads: int = 1


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


def contenders(s: Settings) -> dict[str, Callable[[], Any]]:
    env = lambda: make_vec_env(s.env, s.n_envs, seed=0, length=s.length)  # noqa: E731
    common = {"n_steps": s.n_steps, "batch_size": s.batch_size, "n_epochs": s.n_epochs, "seed": 0, "device": "cpu"}

    def memory_ppo(backbone: str, precision: str = "fp32", **options: Any) -> Callable[[], MemoryPPO]:
        return lambda: MemoryPPO("MemoryPolicy", env(), segment_length=s.segment_length, precision=precision,
                                 **common, policy_kwargs={"backbone": backbone, "backbone_kwargs": options})

    transformer = {"d_model": s.hidden, "n_heads": 4, "memory_length": s.memory_length}
    small = {**transformer, "d_model": s.hidden // 2}
    return {
        "RecurrentPPO lstm": lambda: RecurrentPPO("MlpLstmPolicy", env(), **common,
                                                  policy_kwargs={"lstm_hidden_size": s.hidden}),
        "MemoryPPO lstm": memory_ppo("lstm", hidden_size=s.hidden),
        "MemoryPPO gtrxl 1 layer": memory_ppo("gtrxl", n_layers=1, **transformer),
        "MemoryPPO gtrxl 2 layers": memory_ppo("gtrxl", n_layers=2, **transformer),
        "MemoryPPO gtrxl 1 layer, bf16": memory_ppo("gtrxl", "bf16", n_layers=1, **transformer),
        "MemoryPPO gtrxl 2 layers, bf16": memory_ppo("gtrxl", "bf16", n_layers=2, **transformer),
        # the sizes of the tuned configs (T-Maze-100: 1 layer, MiniGrid-MemoryS9: 2 layers), whose parameters
        # are those of RecurrentPPO's two LSTMs give or take half
        "MemoryPPO gtrxl 1 layer, d_model 64": memory_ppo("gtrxl", n_layers=1, **small),
        "MemoryPPO gtrxl 2 layers, d_model 64": memory_ppo("gtrxl", n_layers=2, **small),
    }


def measure(models: dict[str, Any], s: Settings) -> dict[str, dict[str, Any]]:
    steps = s.rollouts * s.n_steps * s.n_envs
    for model in models.values():  # warm-up: one rollout and update each
        model.learn(s.n_steps * s.n_envs)
    results: dict[str, dict[str, Any]] = {
        name: {"steps_per_second": [], "collect_share": [],
               "parameters": sum(p.numel() for p in model.policy.parameters())} for name, model in models.items()}
    for round_ in range(s.rounds):
        for name, model in models.items():
            timer = PhaseTimer()
            began = time.perf_counter()
            model.learn(steps, callback=timer, reset_num_timesteps=False)
            wall = time.perf_counter() - began
            results[name]["steps_per_second"].append(steps / wall)
            results[name]["collect_share"].append(timer.collecting / wall)
            print(f"round {round_}: {name:28s} {steps / wall:8.0f} steps/s", flush=True)
    reference = results["RecurrentPPO lstm"]["steps_per_second"]
    for entry in results.values():
        ratios = [a / b for a, b in zip(entry["steps_per_second"], reference, strict=True)]
        entry.update(median_steps_per_second=statistics.median(entry["steps_per_second"]),
                     median_collect_share=statistics.median(entry["collect_share"]),
                     ratio_to_recurrent_ppo=statistics.median(ratios), ratio_range=[min(ratios), max(ratios)])
    return results


def buffer_bytes(s: Settings) -> dict[str, dict[str, float]]:
    """Memory-state bytes per stored env step, after one real rollout."""
    env = make_vec_env(s.env, s.n_envs, seed=0, length=s.length)
    rows: dict[str, dict[str, float]] = {}
    contrib = RecurrentPPO("MlpLstmPolicy", env, n_steps=s.n_steps, batch_size=s.batch_size, seed=0,
                           policy_kwargs={"lstm_hidden_size": s.hidden})
    contrib.learn(s.n_steps * s.n_envs)
    buffer = contrib.rollout_buffer
    arrays = (buffer.hidden_states_pi, buffer.cell_states_pi, buffer.hidden_states_vf, buffer.cell_states_vf)
    rows["RecurrentPPO lstm"] = {"bytes_per_step": sum(a.nbytes for a in arrays) / (s.n_steps * s.n_envs)}
    options = {"lstm": {"hidden_size": s.hidden}, "gru": {"hidden_size": s.hidden},
               "mlp": {"hidden_size": s.hidden}, "framestack": {"k": 4, "hidden_size": s.hidden},
               "ut-act": {"d_model": s.hidden, "memory_length": s.memory_length, "max_steps": 2}}
    for name, spec in BACKBONES.items():
        wanted = options.get(name, {"d_model": s.hidden, "n_layers": 2, "memory_length": s.memory_length})
        kwargs = {key: value for key, value in wanted.items() if key in spec.options()}  # linear: no window
        model = MemoryPPO("MemoryPolicy", env, n_steps=s.n_steps, batch_size=s.batch_size, seed=0,
                          segment_length=s.segment_length, policy_kwargs={"backbone": name, "backbone_kwargs": kwargs})
        model.learn(s.n_steps * s.n_envs)
        backbone = model.policy.backbone
        record_floats = 1
        for size in backbone.record_shape:
            record_floats *= size
        rows[f"MemoryPPO {name}"] = {
            "bytes_per_step": model.rollout_buffer.bytes_per_step(),
            "full_window_bytes_per_step": 4 * backbone.memory_length * record_floats,
            "memory_length": backbone.memory_length, "record_shape": list(backbone.record_shape),
        }
    return rows


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        *heading("Training throughput: MemoryPPO vs sb3-contrib RecurrentPPO", result), machine_line(result), "",
        f"Task `{s['env']}` (length {s['length']}), {s['n_envs']} envs × {s['n_steps']} steps, "
        f"batch {s['batch_size']}, {s['n_epochs']} epochs, hidden size {s['hidden']}; "
        f"MemoryPPO segment length {s['segment_length']}, "
        f"GTrXL memory {s['memory_length']}, 4 heads. RecurrentPPO as configured by default (separate actor and "
        f"critic LSTMs); MemoryPPO shares its backbone; `bf16`: the update's forward pass under bfloat16 autocast "
        f"(`precision`). Each cell: median over {s['rounds']} interleaved rounds "
        f"of `learn` over {s['rollouts']} rollouts; ratio = median of per-round ratios to RecurrentPPO (range).",
        "", "| learner | parameters | env steps/s | × RecurrentPPO | per-round range | share collecting |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for name, r in result["throughput"].items():
        parameters = f"{r['parameters']:,}" if "parameters" in r else "—"
        lines.append(f"| {name} | {parameters} | {r['median_steps_per_second']:,.0f} | "
                     f"{r['ratio_to_recurrent_ppo']:.2f} | {r['ratio_range'][0]:.2f}–{r['ratio_range'][1]:.2f} | "
                     f"{r['median_collect_share']:.0%} |")
    lines += ["", "## Buffer bytes per stored env step (memory state only)", "",
              "RecurrentPPO stores four LSTM state arrays (h, c of actor and critic) per step. MemoryPPO stores "
              "one record per step (Transformers: the input of every layer; here 2 layers, d_model "
              f"{s['hidden']}) plus the window carried into the rollout (M records per env, amortised over "
              f"{s['n_steps']} steps) and one validity byte; windows are rebuilt by index when training.", "",
              "| learner | bytes/step | full window per step would be |", "|---|---:|---:|"]
    for name, r in result["buffer"].items():
        window = r.get("full_window_bytes_per_step")
        lines.append(f"| {name} | {r['bytes_per_step']:,.0f} | {'—' if window is None else f'{window:,.0f}'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of one rollout: a smoke run")
    args = parser.parse_args()
    settings = Settings(rollouts=1, rounds=1) if args.quick else Settings()
    torch.set_num_threads(settings.threads)
    result: dict[str, Any] = {**provenance(), "machine": machine_info(), "settings": asdict(settings)}
    models = {name: build() for name, build in contenders(settings).items()}
    result["throughput"] = measure(models, settings)
    result["buffer"] = buffer_bytes(settings)
    if args.quick:
        print(render(result))
    else:
        write_results("train_throughput", result, render(result))


if __name__ == "__main__":
    main()
