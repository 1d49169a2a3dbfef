"""Training speed against its arithmetic: steps/CPU-s, dispatched ops, FLOPs, the compute bound, × RecurrentPPO.

Every case trains with its learner's defaults on 16 envs and one torch thread: engram's MemoryPPO with the default
GTrXL, the GRU and the MLP on T-Maze-20 and a POPGym task, and sb3-contrib's RecurrentPPO (library defaults) on
both (``--threads`` for another thread count). What is measured:

- **steps per CPU-second**: ``learn`` over whole rollouts, the process's CPU time, in interleaved rounds (the case
  order reversed every other round); the rollout's share of it; the median over rounds, and per round the ratio of
  each engram case to RecurrentPPO on the same task;
- **dispatched ops** (``TorchDispatchMode``): per rollout step (``collect_rollouts`` over ``n_steps``), per
  policy call of a rollout step, per ``predict`` step (NumPy in and out, the state's caches carried), and per update
  minibatch (``train`` over its minibatches, backward and Adam in);
- **FLOPs per env step**: ``FlopCounterMode`` over one rollout and one update, plus the CPU attention kernel it
  does not count (``4·B·H·T·K·d`` forward, twice that backward);
- **the compute bound**: every matrix product of that rollout and update timed alone at its own shapes on this
  machine; ``bound = steps / Σ time of the products``, and the fraction of it that training reaches;
- **profile split** (``cProfile``): the phases of ``learn`` as shares of its time.

CleanRL's PPO-TrXL is compared by ``notebooks/cleanrl_compare.py`` in a venv of its own; its last result is cited.

Usage::

    .venv/bin/python benchmarks/speed.py            # a few minutes on 2 cores
    .venv/bin/python benchmarks/speed.py --quick    # about a minute: one round, fewer cases; prints, writes nothing
    .venv/bin/python benchmarks/speed.py --throughput-only --cases gtrxl/T-Maze-20 --json /tmp/x.json
    .venv/bin/python benchmarks/speed.py --throughput-only --cases gtrxl/RepeatPreviousEasy gru/RepeatPreviousEasy \
        --batch-sizes 256 1024 --name minibatch_speed   # results/minibatch_speed.{json,md}
    .venv/bin/python benchmarks/speed.py --throughput-only --cases gtrxl/T-Maze-20 gtrxl/RepeatPreviousEasy \
        --rollout-shapes 16x64 64x16 --name rollout_shape_speed   # results/rollout_shape_speed.{json,md}
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import RESULTS, heading, machine_info, machine_line, provenance, publish, results_target, write_files
from stable_baselines3.common.callbacks import BaseCallback
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from agents import MemoryPPO
from envs import make_vec_env

aten = torch.ops.aten
N_ENVS = 16
TASKS = {"T-Maze-20": ("TMaze-v0", {"length": 20}), "RepeatPreviousEasy": ("popgym-RepeatPreviousEasy-v0", {})}
CASES = ("gtrxl/T-Maze-20", "gru/T-Maze-20", "mlp/T-Maze-20", "RecurrentPPO/T-Maze-20",
         "gtrxl/RepeatPreviousEasy", "gru/RepeatPreviousEasy", "RecurrentPPO/RepeatPreviousEasy")
QUICK_CASES = ("gtrxl/T-Maze-20", "gru/T-Maze-20", "mlp/T-Maze-20", "RecurrentPPO/T-Maze-20")
REFERENCE = "RecurrentPPO"
RECURRENT = "gru"
"""the recurrent baseline of the ratios "× GRU" (GTrXL's speed target is a share of it)"""
TRADES = ((16, 256), (64, 1024), (256, 4096))
"""envs × minibatch of the trade-off rows (the default first): the same 16 minibatches per epoch"""
CPU_ATTENTION = aten._scaled_dot_product_flash_attention_for_cpu.default
CPU_ATTENTION_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
PRODUCTS = (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default, aten.linear.default,
            aten.einsum.default, aten.matmul.default, aten.scaled_dot_product_attention.default, CPU_ATTENTION,
            CPU_ATTENTION_BACKWARD)
"""ops timed for the bound: matrix products and attention (``linear`` and ``einsum`` as inference mode sees them)"""
PHASES = {("collect_rollouts", "on_policy.py"): "rollouts",
          ("forward", "policies/policy.py"): "policy step in the rollouts",
          ("step_wait", "vec_env"): "env steps", ("train", "agents/"): "update",
          ("segments", "buffer.py"): "minibatch gather", ("evaluate_segments", "policy.py"): "update forward",
          ("backward", "_tensor.py"): "backward", ("step", "optim"): "Adam"}
"""phases of ``learn``: (function, a part of its file's path) → label"""


def attention_flops(query: Any, key: Any, *args: Any, **kwargs: Any) -> int:
    """``4·B·H·T·K·d``: the two products ``q kᵀ`` and ``p v`` of one attention call."""
    *batch, t, d = query.shape if hasattr(query, "shape") else query
    k = (key.shape if hasattr(key, "shape") else key)[-2]
    size = 1
    for b in batch:
        size *= b
    return 4 * size * t * k * d


def attention_backward_flops(grad: Any, query: Any, key: Any, *args: Any, **kwargs: Any) -> int:
    """Twice the forward's products (``dq``, ``dk``, ``dv``, ``dp``)."""
    return 2 * attention_flops(query, key)


def flop_counter() -> FlopCounterMode:
    """``FlopCounterMode`` that also counts attention on the CPU (its registry is keyed by op packets)."""
    mapping = {aten._scaled_dot_product_flash_attention_for_cpu:
               lambda q, k, *args, out_shape=None, **kwargs: attention_flops(q, k),
               aten.scaled_dot_product_attention:  # as inference mode dispatches it
               lambda q, k, *args, out_shape=None, **kwargs: attention_flops(q, k),
               aten._scaled_dot_product_flash_attention_for_cpu_backward:
               lambda g, q, k, *args, out_shape=None, **kwargs: attention_backward_flops(g, q, k)}
    return FlopCounterMode(display=False, custom_mapping=mapping)


def _spec(value: Any) -> Any:
    """A tensor as its shape and dtype (lists and tuples element-wise, as tuples), anything else as it is."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, list | tuple):
        return tuple(_spec(v) for v in value)
    return value


def _build(spec: Any) -> Any:
    """Fresh tensors of what :func:`_spec` recorded: normal floats, ``True`` booleans, zero integers."""
    if isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "tensor":
        _, shape, dtype = spec
        if dtype.is_floating_point:
            return torch.randn(shape, dtype=dtype)
        return torch.ones(shape, dtype=dtype) if dtype == torch.bool else torch.zeros(shape, dtype=dtype)
    if isinstance(spec, tuple):
        return tuple(_build(v) for v in spec)
    return spec


class OpCounter(TorchDispatchMode):
    """Counts every aten op dispatched, and each matrix product's call with its shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.products: Counter[tuple[Any, ...]] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.count += 1
        if func in PRODUCTS:
            kw = tuple(sorted((k, _spec(v)) for k, v in (kwargs or {}).items()))
            self.products[(func, _spec(args), kw)] += 1
        return func(*args, **(kwargs or {}))


class PhaseTimer(BaseCallback):
    """CPU and wall time spent collecting rollouts (the rest of ``learn`` is updates)."""

    def __init__(self) -> None:
        super().__init__()
        self.collecting = 0.0
        self.collecting_wall = 0.0
        self._began = (0.0, 0.0)

    def _on_rollout_start(self) -> None:
        self._began = (time.process_time(), time.perf_counter())

    def _on_rollout_end(self) -> None:
        self.collecting += time.process_time() - self._began[0]
        self.collecting_wall += time.perf_counter() - self._began[1]

    def _on_step(self) -> bool:
        return True


def time_block(fn: Any, calls: int) -> float:
    """Seconds per call of ``fn`` over ``calls`` calls."""
    began = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - began) / calls


@dataclass
class Case:
    backbone: str
    task: str
    n_envs: int = N_ENVS
    batch_size: int | None = None  # the learner's default
    n_steps: int | None = None  # the learner's default

    @property
    def name(self) -> str:
        shape = "" if self.batch_size is None else f" {self.n_envs} envs × minibatch {self.batch_size}"
        if self.n_steps is not None:
            shape += f" {self.n_envs} envs × {self.n_steps} steps"
        return f"{self.backbone}/{self.task}{shape}"

    @property
    def engram(self) -> bool:
        return self.backbone != REFERENCE

    def build(self) -> Any:
        env_id, kwargs = TASKS[self.task]
        env = make_vec_env(env_id, self.n_envs, seed=0, **kwargs)
        if not self.engram:
            from sb3_contrib import RecurrentPPO

            return RecurrentPPO("MlpLstmPolicy", env, seed=0, device="cpu")
        shape = {k: v for k, v in (("batch_size", self.batch_size), ("n_steps", self.n_steps)) if v is not None}
        return MemoryPPO("MemoryPolicy", env, policy_kwargs={"backbone": self.backbone}, seed=0, device="cpu",
                         **shape)


def case(name: str) -> Case:
    backbone, task = name.split("/")
    return Case(backbone, task)


def rollout_steps(model: Any) -> int:
    return model.n_steps * model.n_envs


def throughput(cases: list[Case], rounds: int, rollouts: int) -> dict[str, dict[str, Any]]:
    """Steps per CPU-second of ``learn`` in interleaved rounds; the ratio of each engram case to RecurrentPPO and to
    the GRU on its task, per round (the median and range over rounds). RecurrentPPO trains one rollout per
    measurement (its defaults: 128 steps × 16 envs)."""
    models = {c.name: c.build() for c in cases}
    for model in models.values():
        model.learn(rollout_steps(model))  # warm-up
    out: dict[str, dict[str, Any]] = {
        c.name: {"steps_per_cpu_s": [], "steps_per_s": [], "rollout_cpu_share": [],
                 "parameters": sum(p.numel() for p in models[c.name].policy.parameters())} for c in cases}
    for r in range(rounds):
        for c in cases if r % 2 == 0 else cases[::-1]:
            model = models[c.name]
            steps = rollout_steps(model) * (rollouts if c.engram else 1)
            timer = PhaseTimer()
            cpu, wall = time.process_time(), time.perf_counter()
            model.learn(steps, callback=timer, reset_num_timesteps=False)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            out[c.name]["steps_per_cpu_s"].append(steps / cpu)
            out[c.name]["steps_per_s"].append(steps / wall)
            out[c.name]["rollout_cpu_share"].append(timer.collecting / cpu)
            print(f"round {r}: {c.name:32s} {steps / cpu:8.0f} steps/CPU-s", file=sys.stderr, flush=True)
    for c in cases:
        entry = out[c.name]
        entry["median_steps_per_cpu_s"] = statistics.median(entry["steps_per_cpu_s"])
        entry["median_rollout_cpu_share"] = statistics.median(entry["rollout_cpu_share"])
        for key, reference in (("ratio_to_recurrent_ppo", REFERENCE), ("ratio_to_gru", RECURRENT)):
            other = out.get(f"{reference}/{c.task}")
            if c.engram and other is not None and other is not entry:
                ratios = [a / b for a, b in zip(entry["steps_per_cpu_s"], other["steps_per_cpu_s"], strict=True)]
                entry[key] = {"median": statistics.median(ratios), "range": [min(ratios), max(ratios)]}
    return out


class _Quiet(BaseCallback):
    def _on_step(self) -> bool:
        return True


def _rollout(model: Any) -> None:
    callback = _Quiet()
    callback.init_callback(model)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, model.n_steps)


def _policy_call(model: Any) -> None:
    from stable_baselines3.common.utils import obs_as_tensor

    with torch.inference_mode():
        obs = obs_as_tensor(model._last_obs, model.device)
        starts = torch.as_tensor(model._last_episode_starts, device=model.device).bool()
        model._act(model.policy(obs, model._last_state, starts))


def _predict_call(model: Any) -> Any:
    """One ``model.predict`` step of the rollout's envs after a first one (the caches in the state, as in use)."""
    obs = model._last_obs
    starts = np.zeros(len(model._last_episode_starts), dtype=bool)
    _, state = model.predict(obs, None, starts)
    model.predict(obs, state, starts)  # what checking a state computes once per policy
    return lambda: model.predict(obs, state, starts)


def _counted(fn: Any) -> tuple[OpCounter, int]:
    with OpCounter() as ops:
        fn()
    counter = flop_counter()
    with counter:
        fn()
    return ops, counter.get_total_flops()


def _product_seconds(products: Counter[tuple[Any, ...]], min_seconds: float) -> tuple[float, int]:
    """Seconds of every matrix product in ``products`` run alone at its shapes on this machine, and their FLOPs."""
    total, flops = 0.0, 0
    with torch.no_grad():
        for (func, args, kwargs), count in products.items():
            built, built_kwargs = _build(args), {k: _build(v) for k, v in kwargs}
            counter = flop_counter()
            with counter:
                func(*built, **built_kwargs)
            call = partial(func, *built, **built_kwargs)
            calls = max(1, int(min_seconds / max(time_block(call, 3), 1e-7)))
            total += count * time_block(call, calls)
            flops += count * counter.get_total_flops()
    return total, flops


def arithmetic(c: Case, min_seconds: float) -> dict[str, Any]:
    """Ops, FLOPs and the compute bound of one engram case (a fresh model after one warm-up ``learn``)."""
    model = c.build()
    model.learn(rollout_steps(model))
    steps = rollout_steps(model)
    call_ops, _ = _counted(lambda: _policy_call(model))
    predict_ops, _ = _counted(_predict_call(model))
    rollout_ops, rollout_flops = _counted(lambda: _rollout(model))
    minibatches = model.n_epochs * steps // model.batch_size
    update_ops, update_flops = _counted(model.train)
    rollout_s, rollout_own = _product_seconds(rollout_ops.products, min_seconds)
    update_s, update_own = _product_seconds(update_ops.products, min_seconds)
    return {
        "parameters": sum(p.numel() for p in model.policy.parameters()),
        "ops_per_policy_call": call_ops.count, "ops_per_predict": predict_ops.count,
        "ops_per_rollout_step": rollout_ops.count / model.n_steps,
        "ops_per_minibatch": update_ops.count / minibatches, "minibatches_per_update": minibatches,
        "flops_per_step_rollout": rollout_flops / steps, "flops_per_step_update": update_flops / steps,
        "flops_per_step": (rollout_flops + update_flops) / steps,
        "product_flops_per_step": (rollout_own + update_own) / steps,
        "rollout_gflops": rollout_own / rollout_s / 1e9 if rollout_s else 0.0,
        "update_gflops": update_own / update_s / 1e9 if update_s else 0.0,
        "bound_steps_per_s": steps / (rollout_s + update_s),
        "bound_rollout_s_per_step": rollout_s / steps, "bound_update_s_per_step": update_s / steps,
    }


def profile_split(c: Case, rollouts: int) -> dict[str, float]:
    """Phases of ``learn`` as shares of its time under cProfile (cumulative time of each phase's function)."""
    model = c.build()
    model.learn(rollout_steps(model))
    profiler = cProfile.Profile()
    began = time.perf_counter()
    profiler.enable()
    model.learn(rollouts * rollout_steps(model), reset_num_timesteps=False)
    profiler.disable()
    total = time.perf_counter() - began
    cumulative: dict[str, float] = {}
    for (file, _, name), (_, _, _, cum, _) in pstats.Stats(profiler).stats.items():  # type: ignore[attr-defined]
        for key in PHASES:
            if key[0] == name and key[1] in file:
                cumulative[key] = max(cumulative.get(key, 0.0), cum)
    return {label: cumulative.get(key, 0.0) / total for key, label in PHASES.items()}


def render_throughput(result: dict[str, Any]) -> str:
    """The page of a ``--throughput-only`` run: the throughput table alone."""
    return "\n".join([*_throughput_lines(result, "Training speed")]) + "\n"


def _throughput_lines(result: dict[str, Any], title: str) -> list[str]:
    s = result["settings"]
    lines = [*heading(title, result), machine_line(result), "",
             f"{N_ENVS} envs, each learner's defaults (engram: 64 steps × 16 envs per rollout, minibatch 256 unless "
             "the case names another, 4 epochs, segments of 16; RecurrentPPO: 128 × 16, minibatch 128, 10 epochs), "
             f"{s['threads']} torch thread(s). "
             f"Median of {s['rounds']} interleaved rounds of `learn` over {s['rollouts']} rollout(s) "
             "(RecurrentPPO: one); × RecurrentPPO and × GRU = median of the per-round ratios on the same task "
             "(range).", "",
             "| case | parameters | steps/CPU-s | × RecurrentPPO | × GRU | rollout share of CPU |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, r in result["throughput"].items():
        lines.append(f"| {name} | {r['parameters']:,} | {r['median_steps_per_cpu_s']:,.0f} | "
                     f"{_ratio(r.get('ratio_to_recurrent_ppo'), 1)} | {_ratio(r.get('ratio_to_gru'), 2)} | "
                     f"{r['median_rollout_cpu_share']:.0%} |")
    return lines


def _ratio(ratio: dict[str, Any] | None, digits: int) -> str:
    """`median (min–max)` of per-round ratios, or a dash where the case has no reference."""
    if ratio is None:
        return "—"
    low, high = ratio["range"]
    return f"{ratio['median']:.{digits}f} ({low:.{digits}f}–{high:.{digits}f})"


def render(result: dict[str, Any]) -> str:
    lines = _throughput_lines(result, "Training speed against its arithmetic")
    lines += ["", "Arithmetic of one rollout and one update (`TorchDispatchMode`, `FlopCounterMode` plus the CPU "
              "attention kernel; the bound times every matrix product alone at its shapes on this machine):", "",
              "| case | ops per policy call | ops per `predict` | ops per rollout step | ops per minibatch "
              "| MFLOP/step (rollout + update) | GFLOP/s at rollout / update shapes | bound steps/s "
              "| fraction of bound |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, a in result["arithmetic"].items():
        measured = result["throughput"].get(name, {}).get("median_steps_per_cpu_s")
        fraction = f"{measured / a['bound_steps_per_s']:.1%}" if measured else "—"
        lines.append(f"| {name} | {a['ops_per_policy_call']} | {a['ops_per_predict']} | "
                     f"{a['ops_per_rollout_step']:.0f} | "
                     f"{a['ops_per_minibatch']:.0f} | {a['flops_per_step'] / 1e6:.2f} "
                     f"({a['flops_per_step_rollout'] / 1e6:.2f} + {a['flops_per_step_update'] / 1e6:.2f}) | "
                     f"{a['rollout_gflops']:.0f} / {a['update_gflops']:.0f} | {a['bound_steps_per_s']:,.0f} | "
                     f"{fraction} |")
    if result.get("trade"):
        lines += ["", "Envs × minibatch, default GTrXL on T-Maze-20 (64 steps per rollout, 16 minibatches per epoch), "
                  "interleaved rounds; × default = median of the per-round ratios to 16 × 256:", "",
                  "| envs × minibatch | steps/CPU-s | × default | rollout share of CPU |", "|---|---:|---:|---:|"]
        trades = list(result["trade"].values())
        for (name, r) in result["trade"].items():
            ratios = [a / b for a, b in zip(r["steps_per_cpu_s"], trades[0]["steps_per_cpu_s"], strict=True)]
            shape = name.split(" ", 1)[1] if " " in name else name
            lines.append(f"| {shape} | {r['median_steps_per_cpu_s']:,.0f} | {statistics.median(ratios):.2f} | "
                         f"{r['median_rollout_cpu_share']:.0%} |")
    if result.get("profile"):
        lines += ["", f"Profile split of `{result['profile_case']}` (cProfile, cumulative time; phases nest):", "",
                  "| phase | share |", "|---|---:|"]
        lines += [f"| {label} | {share:.0%} |" for label, share in result["profile"].items()]
    clean = result.get("cleanrl")
    if clean:
        lines += ["", f"CleanRL's PPO-TrXL on its MiniGrid-MemoryS9 set-up, not re-run here: engram "
                  f"{clean['ratio']:.2f}× ({clean['min']:.2f}–{clean['max']:.2f}), {clean['threads']} threads, "
                  f"{clean['date']} (`notebooks/cleanrl_compare.py`, results/cleanrl_compare.md)."]
    return "\n".join(lines) + "\n"


def cleanrl_citation() -> dict[str, Any] | None:
    path = RESULTS / "cleanrl_compare.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    ratio = data["summary"]["ratio"]
    return {"ratio": ratio["median"], "min": ratio["min"], "max": ratio["max"], "date": data["date"][:10],
            "threads": data["settings"]["threads"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T-Maze cases, one round of one rollout")
    parser.add_argument("--cases", nargs="+", choices=CASES, help="the cases to run (default: all)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per engram measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the default and the docs: 1)")
    parser.add_argument("--throughput-only", action="store_true", help="skip ops, FLOPs, bound and profile")
    parser.add_argument("--json", type=Path, help="with --throughput-only: write the measurements here alone "
                                                  "(default: results/<name>.json and .md)")
    parser.add_argument("--batch-sizes", nargs="+", type=int, metavar="N",
                        help="with --throughput-only: each engram case at each of these minibatch sizes (16 envs)")
    parser.add_argument("--rollout-shapes", nargs="+", metavar="ENVSxSTEPS",
                        help="with --throughput-only: each engram case at these envs × steps per rollout (e.g. 16x64 "
                             "64x16: the same rollout and minibatches, more envs stepped at once)")
    parser.add_argument("--name", help="results file name (default: speed; --quick writes only given --name or --out)")
    parser.add_argument("--out", type=Path, help="directory of the results files (default: benchmarks/results)")
    args = parser.parse_args(argv)
    target = results_target(args.quick, args.name, args.out, "speed")
    torch.set_num_threads(args.threads)
    names = args.cases or (QUICK_CASES if args.quick else CASES)
    rounds, rollouts = (1, 1) if args.quick else (args.rounds, args.rollouts)
    cases = [case(n) for n in names]
    if args.batch_sizes:
        if not args.throughput_only:
            parser.error("--batch-sizes needs --throughput-only")
        if min(args.batch_sizes) < 1:
            parser.error(f"--batch-sizes {min(args.batch_sizes)}: expected integers >= 1")
        cases = [Case(c.backbone, c.task, N_ENVS, b) for c in cases if c.engram for b in args.batch_sizes]
    if args.rollout_shapes:
        if not args.throughput_only or args.batch_sizes:
            parser.error("--rollout-shapes needs --throughput-only and no --batch-sizes")
        shapes = [shape.split("x") for shape in args.rollout_shapes]
        if not all(len(s) == 2 and all(part.isdigit() and int(part) >= 1 for part in s) for s in shapes):
            parser.error(f"--rollout-shapes {' '.join(args.rollout_shapes)}: expected ENVSxSTEPS, e.g. 64x16")
        cases = [Case(c.backbone, c.task, int(e), None, int(n)) for c in cases if c.engram for e, n in shapes]
    result: dict[str, Any] = {**provenance(), "machine": machine_info(),
                              "settings": {"rounds": rounds, "rollouts": rollouts, "n_envs": N_ENVS, "cases": names,
                                           "threads": args.threads}}
    result["throughput"] = throughput(cases, rounds, rollouts)
    if args.throughput_only:
        if args.json:
            write_files({args.json: json.dumps(result, indent=2) + "\n"})
        else:
            publish(target, result, render_throughput)
        return result
    if not args.cases:
        trades = [Case("gtrxl", "T-Maze-20", n, b) for n, b in (TRADES[:2] if args.quick else TRADES)]
        result["trade"] = throughput(trades, rounds, 1 if args.quick else 2)
    seconds = 0.002 if args.quick else 0.02
    result["arithmetic"] = {c.name: arithmetic(c, seconds) for c in cases if c.engram}
    result["profile_case"] = cases[0].name
    result["profile"] = profile_split(cases[0], 1 if args.quick else 4)
    result["cleanrl"] = cleanrl_citation()
    publish(target, result, render)
    return result


if __name__ == "__main__":
    main()
