"""Rollout step cost of the memory backbones: the cached ``step`` against a naive recomputation.

For ``trxl``, ``gtrxl``, ``ut-act`` and ``lstm`` (16 envs, ``d_model = 128``, 2 layers; ``ut-act``
with ``max_steps = 2``, i.e. two applications of its shared block) and memory lengths
``M ∈ {16, 64, 256, 1024}``, this measures microseconds per rollout step of

- **cached**: the backbone's own :meth:`~policies.backbone.MemoryBackbone.step` under
  ``torch.inference_mode()``, from a state whose window is full (the episode started ``M`` steps
  earlier), no episode start. Attention reads the cached keys/values of the window: O(M) per step.
- **naive**: :class:`NaiveStep`, the reference the cache is measured against. It keeps the raw
  inputs of the last ``M`` steps plus the current one and recomputes the whole window from
  scratch through every layer at each step: ``forward_sequence`` over ``[M + 1, B, D]``, output
  of the last position. That is O(M²) attention work per step for the Transformers, O(M) for
  the LSTM (re-running the recurrence over the window from a zero carry).

Before timing, each pair is checked on the same inputs: at the step that ends an episode of
exactly ``M + 1`` steps, both see the same history, so their outputs must agree (the maximum
absolute difference is reported). Later steps differ by design: the cached Transformer memory
of layer ``l`` holds layer inputs that saw ``l·M`` steps back, the naive window only ``M``.

Timing: a fixed torch thread count, warm-up calls, then ``rounds`` rounds that each time a block
of cached steps followed by a block of naive steps (interleaved, so both see the same machine
load); each block runs enough calls to last ``block_seconds``. Reported: the median over rounds
of µs/step for each path, their ratio, and the per-round ratios. Results go to
``<out>/step_cost.json`` (every raw number, settings, machine) and ``<out>/step_cost.md``.

Usage::

    .venv/bin/python benchmarks/step_cost.py                 # full run, a few minutes on 2 cores
    .venv/bin/python benchmarks/step_cost.py --quick --out /tmp/step_cost   # smoke test, seconds
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from common import BackboneSize, heading, machine_info, machine_line, provenance, write_results
from torch import Tensor

from policies import make_backbone
from policies.backbone import MemoryBackbone
from policies.backbones.recurrent import RecurrentMemory
from policies.window import State, empty_window

BACKBONES = ("trxl", "gtrxl", "ut-act", "lstm")
MEMORY_LENGTHS = (16, 64, 256, 1024)
QUICK_MEMORY_LENGTHS = (16, 64)
M_INDEPENDENT = ("lstm",)  # backbones whose cached step does not depend on M


@dataclass
class Settings(BackboneSize):
    """What one run measures and how."""

    backbones: tuple[str, ...] = BACKBONES
    memory_lengths: tuple[int, ...] = MEMORY_LENGTHS
    threads: int = 1
    rounds: int = 7
    block_seconds: float = 0.3
    max_calls: int = 2000
    input_pool: int = 64
    seed: int = 0
    quick: bool = False


@dataclass
class Timing:
    """µs per step of one path in every round, and how many calls each round timed."""

    rounds_us: list[float] = field(default_factory=list)
    calls_per_round: int = 0

    @property
    def median_us(self) -> float:
        return statistics.median(self.rounds_us)


def backbone_options(name: str, memory_length: int, settings: Settings) -> dict[str, Any]:
    """The ``make_backbone`` options of ``name`` at this memory length."""
    if name == "lstm":  # one record (the carry); no dependence on M
        return {"hidden_size": settings.d_model, "n_layers": settings.n_layers}
    options: dict[str, Any] = {"d_model": settings.d_model, "n_heads": settings.n_heads,
                               "memory_length": memory_length}
    if name == "ut-act":  # a shared block applied up to max_steps times: n_layers depth applications
        options["max_steps"] = settings.n_layers
    else:
        options["n_layers"] = settings.n_layers
    return options


class NaiveStep:
    """The reference rollout step: recompute the last ``M + 1`` steps from their raw inputs.

    Keeps the raw inputs of the last ``M`` steps of the episode plus the current one in a
    window ``[M + 1, B, D]`` (pushed by one each step) and runs the backbone's
    ``forward_sequence`` over the whole window from an empty state, episode start at the
    window's first step, taking the last position's output. For the Transformers the state
    has zero memory slots, so no work is spent on empty slots: only the window itself is
    projected and attended (every layer, every position), O(M²) per step. The LSTM (a window
    of one record) starts from its zero initial carry and re-runs the recurrence over the
    window, O(M) per step. Its output equals the cached step's only while the episode is at
    most ``M + 1`` steps long (see the module docstring); what is measured here is its cost.
    """

    def __init__(self, backbone: MemoryBackbone, window: Tensor, memory_length: int) -> None:
        if window.shape[0] != memory_length + 1:
            raise ValueError(f"the window holds M + 1 = {memory_length + 1} steps, got {window.shape[0]}")
        self.backbone = backbone
        self.window = window.clone()
        n_envs = window.shape[1]
        self.starts = torch.zeros(memory_length + 1, n_envs, dtype=torch.bool, device=window.device)
        self.starts[0] = True
        if isinstance(backbone, RecurrentMemory):  # the zero carry
            self.empty: Callable[[], State] = lambda: backbone.initial_state(n_envs)
        else:  # no memory slot at all: attention_mask and window_before accept M_state = 0
            self.empty = lambda: empty_window(n_envs, 0, backbone.record_shape, device=window.device,
                                              dtype=window.dtype)

    def recompute(self) -> Tensor:
        """The output ``[B, output_dim]`` of the window's last step, recomputed from scratch."""
        y, _, _ = self.backbone.forward_sequence(self.window, self.empty(), self.starts)
        return y[-1]

    def __call__(self, x: Tensor) -> Tensor:
        """Push ``x`` ``[B, D]`` into the window and recompute it."""
        self.window = torch.cat([self.window[1:], x.unsqueeze(0)])
        return self.recompute()


def time_block(fn: Callable[[], object], calls: int) -> float:
    """µs per call of ``calls`` back-to-back calls of ``fn`` (garbage collector paused)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    return elapsed / calls * 1e6


def calls_for(fn: Callable[[], object], settings: Settings) -> int:
    """How many calls of ``fn`` fill one block of ``settings.block_seconds``."""
    per_call = time_block(fn, 1) / 1e6
    return max(1, min(settings.max_calls, math.ceil(settings.block_seconds / max(per_call, 1e-9))))


def measure_cell(name: str, memory_length: int, settings: Settings) -> dict[str, Any]:
    """Check and time the cached and naive step of one backbone at one memory length."""
    options = backbone_options(name, memory_length, settings)
    torch.manual_seed(settings.seed)
    backbone = make_backbone(name, settings.input_dim, **options).eval()
    B, D, M = settings.n_envs, settings.input_dim, memory_length
    generator = torch.Generator().manual_seed(settings.seed + 1)
    history = torch.randn(M + 1, B, D, generator=generator)
    pool = torch.randn(settings.input_pool, B, D, generator=generator)
    no_start = torch.zeros(B, dtype=torch.bool)
    starts = torch.zeros(M, B, dtype=torch.bool)
    starts[0] = True

    with torch.inference_mode():
        # a full window: an episode that started M steps ago (built in one call, as training does)
        _, state, _ = backbone.forward_sequence(history[:M], backbone.initial_state(B), starts)
        y_cached, state = backbone.step(history[M], state, no_start)  # also builds the caches
        naive = NaiveStep(backbone, history, M)
        y_naive = naive.recompute()
        check = (y_cached - y_naive).abs().max().item()

        cursor = {"cached": 0, "naive": 0}
        carried = {"state": state}

        def cached_step() -> Tensor:
            x = pool[cursor["cached"] % len(pool)]
            cursor["cached"] += 1
            y, carried["state"] = backbone.step(x, carried["state"], no_start)
            return y

        def naive_step() -> Tensor:
            x = pool[cursor["naive"] % len(pool)]
            cursor["naive"] += 1
            return naive(x)

        for _ in range(3):  # warm-up: allocator, caches, first-call overheads
            cached_step()
        naive_step()
        cached, reference = Timing(), Timing()
        cached.calls_per_round = calls_for(cached_step, settings)
        reference.calls_per_round = calls_for(naive_step, settings)
        for _ in range(settings.rounds):
            cached.rounds_us.append(time_block(cached_step, cached.calls_per_round))
            reference.rounds_us.append(time_block(naive_step, reference.calls_per_round))
        window_full = bool(carried["state"]["valid"].all())

    ratios = [n / c for n, c in zip(reference.rounds_us, cached.rounds_us, strict=True)]
    return {
        "backbone": name,
        "memory_length": M,
        "options": options,
        "depth_applications": settings.n_layers,
        "check_max_abs_diff": check,
        "window_full_after_timing": window_full,
        "cached": {**asdict(cached), "median_us": cached.median_us, "min_us": min(cached.rounds_us)},
        "naive": {**asdict(reference), "median_us": reference.median_us, "min_us": min(reference.rounds_us)},
        "ratio": reference.median_us / cached.median_us,
        "ratio_per_round": ratios,
    }


def linear_fit(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least squares ``y ≈ a + b·x`` with its R²."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return {"intercept_us": a, "slope_us_per_slot": b, "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0}


def shape(cells: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per backbone: linear fit of the cached cost in M, and growth from the second-largest to the largest M."""
    summary: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(cell["backbone"] for cell in cells):
        rows = sorted((c for c in cells if c["backbone"] == name), key=lambda c: c["memory_length"])
        Ms = [float(c["memory_length"]) for c in rows]
        entry: dict[str, Any] = {}
        cached = [c["cached"]["median_us"] for c in rows]
        if name in M_INDEPENDENT:
            entry["cached_spread"] = {"min_us": min(cached), "max_us": max(cached),
                                      "max_over_min": max(cached) / min(cached)}
        if len(rows) >= 2:
            entry["cached_fit"] = linear_fit(Ms, cached)
            lo, hi = rows[-2], rows[-1]
            growth = hi["memory_length"] / lo["memory_length"]
            for path in ("cached", "naive"):
                factor = hi[path]["median_us"] / lo[path]["median_us"]
                entry[f"{path}_growth"] = {"from_M": lo["memory_length"], "to_M": hi["memory_length"],
                                           "factor": factor, "loglog_slope": math.log(factor) / math.log(growth)}
        summary[name] = entry
    return summary


def render_markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = heading("Rollout step cost: cached `step` vs naive recomputation", result)
    if s["quick"]:
        lines += ["**Quick smoke run (`--quick`): too few repetitions to report.**", ""]
    lines += [
        f"{machine_line(result)} · {result['wall_seconds']:.0f} s",
        "",
        f"{s['n_envs']} envs, input_dim {s['input_dim']}, d_model {s['d_model']}, {s['n_layers']} layers, "
        f"{s['n_heads']} heads; `ut-act`: max_steps={s['n_layers']} (its shared block applied {s['n_layers']} "
        f"times: the ACT loop always runs max_steps steps); `lstm`: hidden_size {s['d_model']}, "
        f"{s['n_layers']} layers, no dependence on M (its cached step is measured again in every M row).",
        "",
        "**cached**: the backbone's `step` under `torch.inference_mode()`, window full, no episode start. "
        "**naive**: `NaiveStep`, `forward_sequence` over the raw inputs of the last M steps plus the current "
        "one, from an empty state, every layer recomputed, last output. "
        f"µs/step: median over {s['rounds']} interleaved rounds (cached block, then naive block, each "
        f"≥ {s['block_seconds']} s); ratio = naive median / cached median, with the range of the "
        "per-round ratios. check: max |cached − naive| on the step where both see the same history.",
        "",
        "| backbone | M | cached µs/step | naive µs/step | naive / cached | per-round ratios | check |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    order = {name: i for i, name in enumerate(s["backbones"])}
    for c in sorted(result["cells"], key=lambda c: (order[c["backbone"]], c["memory_length"])):
        r = c["ratio_per_round"]
        lines.append(f"| {c['backbone']} | {c['memory_length']} | {c['cached']['median_us']:,.0f} | "
                     f"{c['naive']['median_us']:,.0f} | {c['ratio']:.1f}× | {min(r):.1f}–{max(r):.1f} | "
                     f"{c['check_max_abs_diff']:.1e} |")
    lines += ["", "## Shape", ""]
    for name, entry in result["shape"].items():
        if "cached_fit" not in entry:
            continue
        fit, cg, ng = entry["cached_fit"], entry["cached_growth"], entry["naive_growth"]
        if "cached_spread" in entry:
            spread = entry["cached_spread"]
            cached_text = (f"cached does not depend on M: {spread['min_us']:,.0f}–{spread['max_us']:,.0f} µs "
                           f"over the M rows (max/min {spread['max_over_min']:.2f}, machine noise)")
        else:
            cached_text = (f"cached ≈ {fit['intercept_us']:,.0f} µs + {fit['slope_us_per_slot']:.1f} µs × M "
                           f"(least squares, R² = {fit['r2']:.3f}); cached(M={cg['to_M']}) / cached(M={cg['from_M']})"
                           f" = {cg['factor']:.2f} (log-log slope {cg['loglog_slope']:.2f})")
        lines.append(f"- `{name}`: {cached_text}; naive(M={ng['to_M']}) / naive(M={ng['from_M']}) = "
                     f"{ng['factor']:.1f} (log-log slope {ng['loglog_slope']:.2f}).")
    target = [c for c in result["cells"] if c["memory_length"] == 256]
    if target:
        lines += ["", "Cached ≥ 3× faster than naive at M = 256: " + ", ".join(
            f"`{c['backbone']}` {c['ratio']:.1f}× {'yes' if c['ratio'] >= 3 else 'NO'}" for c in target) + "."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: M in {QUICK_MEMORY_LENGTHS}, 2 rounds, tiny blocks")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"),
                        help="folder for step_cost.json and step_cost.md (default: %(default)s)")
    parser.add_argument("--backbones", nargs="+", default=list(BACKBONES), choices=BACKBONES)
    parser.add_argument("--memory-lengths", nargs="+", type=int, default=None,
                        help=f"default {MEMORY_LENGTHS} ({QUICK_MEMORY_LENGTHS} with --quick)")
    parser.add_argument("--threads", type=int, default=Settings.threads,
                        help="torch.set_num_threads (default %(default)s: with 2 threads on a shared 2-core "
                             "machine, OpenMP barriers make single-step timings swing several-fold)")
    parser.add_argument("--rounds", type=int, default=None, help=f"default {Settings.rounds} (2 with --quick)")
    parser.add_argument("--block-seconds", type=float, default=None,
                        help=f"default {Settings.block_seconds} (0.01 with --quick)")
    parser.add_argument("--seed", type=int, default=Settings.seed)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    settings = Settings(
        backbones=tuple(args.backbones),
        memory_lengths=tuple(args.memory_lengths or (QUICK_MEMORY_LENGTHS if args.quick else MEMORY_LENGTHS)),
        threads=args.threads,
        rounds=args.rounds or (2 if args.quick else Settings.rounds),
        block_seconds=args.block_seconds or (0.01 if args.quick else Settings.block_seconds),
        seed=args.seed,
        quick=args.quick,
    )
    torch.set_num_threads(settings.threads)
    info = {**machine_info(), "torch_interop_threads": torch.get_num_interop_threads()}
    began = time.perf_counter()
    cells = []
    for M in settings.memory_lengths:
        for name in settings.backbones:
            cell = measure_cell(name, M, settings)
            cells.append(cell)
            print(f"{name:7s} M={M:5d}  cached {cell['cached']['median_us']:10,.0f} µs  "
                  f"naive {cell['naive']['median_us']:12,.0f} µs  ratio {cell['ratio']:7.1f}  "
                  f"check {cell['check_max_abs_diff']:.1e}", file=sys.stderr, flush=True)
    result = {
        "benchmark": "step_cost",
        **provenance(),
        "wall_seconds": time.perf_counter() - began,
        "settings": asdict(settings),
        "machine": info,
        "cells": cells,
        "shape": shape(cells),
    }
    write_results("step_cost", result, render_markdown, args.out)
    return result


if __name__ == "__main__":
    main()
