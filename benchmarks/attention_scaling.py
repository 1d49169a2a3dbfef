"""Time and memory of one training segment against memory length, for every registered attention.

Every attention of the registry (``policies.ATTENTIONS``), each with
its default options, inside a GTrXL backbone (d_model 128, 2 layers, 4 heads), and the ``linear``
backbone (Katharopoulos et al. 2020: its attention carries sums, so its cost does not depend on M),
at memory lengths M (default 64, 256, 1024). One training segment: 16 envs × T = 16 steps whose
memory window is full (M valid records), forward and backward of ``sum(outputs)``,
one torch thread. Measured:

- **time**: ms per forward+backward, ``rounds`` interleaved rounds of ``calls`` calls each (every
  cell once per round, so all see the same machine load; ``common.time_block``),
  reported as the median over rounds of the ratio to the GTrXL default attention (``relative``) at
  the same M in the same round;
- **saved**: the bytes autograd keeps for backward (``saved_tensors_hooks``, parameters left out;
  :func:`experiments.activation_bytes.saved_activation_bytes`);
- **peak**: the most bytes allocated at once during forward and backward, above the level before,
  the parameters' gradients included (``torch.profiler`` memory events;
  :func:`experiments.activation_bytes.peak_allocated_bytes`).

The log-log slope of each quantity against M (least squares over the lengths) sits beside it: the
segment's fixed cost (projections, feed-forward, the T × T part) keeps slopes below an attention's
asymptotic order at small M.

Usage::

    .venv/bin/python benchmarks/attention_scaling.py                 # ≈ 3 min on 2 cores
    .venv/bin/python benchmarks/attention_scaling.py --lengths 256 1024 4096
    .venv/bin/python benchmarks/attention_scaling.py --quick --out /tmp/as   # smoke test, seconds
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from common import RESULTS, BackboneSize, heading, machine_info, machine_line, provenance, time_block, write_results

from experiments.activation_bytes import peak_allocated_bytes, saved_activation_bytes
from policies import ATTENTIONS, BACKBONES, make_backbone
from policies.backbone import MemoryBackbone
from policies.backbones.linear_attention import CausalLinearAttention

LINEAR = "linear backbone"
REFERENCE = BACKBONES["gtrxl"].options()["attention"]
"""the attention ratios are taken against: GTrXL's default"""


@dataclass
class Settings(BackboneSize):
    """What one run measures and how."""

    lengths: tuple[int, ...] = (64, 256, 1024)
    segment_length: int = 16
    rounds: int = 5
    calls: int = 5
    seed: int = 0
    quick: bool = False


QUICK = Settings(lengths=(8, 16), n_envs=2, segment_length=4, d_model=32, n_heads=2, rounds=2, calls=1, quick=True)


def members() -> list[str]:
    """Every registered attention, then the linear backbone."""
    return [*ATTENTIONS, LINEAR]


def build(member: str, memory_length: int, settings: Settings) -> MemoryBackbone:
    """GTrXL with attention ``member`` and memory ``memory_length``, or the linear backbone."""
    options: dict[str, Any] = {"d_model": settings.d_model, "n_layers": settings.n_layers, "n_heads": settings.n_heads}
    if member != LINEAR:
        options.update(attention=member, memory_length=memory_length)
    torch.manual_seed(settings.seed)
    return make_backbone("linear" if member == LINEAR else "gtrxl", settings.input_dim, **options).train()


def training_segment(backbone: MemoryBackbone, settings: Settings) -> Callable[[], None]:
    """A closure running forward and backward of one segment from a state whose window is full: every
    slot valid, its record uniform in ``[0, 1)`` (the values do not change the cost, and building the
    window by running ``M`` steps would cost more than the measurement at large M)."""
    B, T = settings.n_envs, settings.segment_length
    generator = torch.Generator().manual_seed(settings.seed + 1)
    segment = torch.randn(T, B, settings.input_dim, generator=generator)
    empty = backbone.initial_state(B)
    state = empty._replace(memory=torch.rand(empty.memory.shape, generator=generator),
                           valid=torch.ones_like(empty.valid))
    if state.clock is not None:  # attentions laid out in episode time: the full window lies inside the episode
        state = state._replace(clock=torch.full_like(state.clock, backbone.memory_length))
    no_start = torch.zeros(T, B, dtype=torch.bool)

    def forward_backward() -> None:
        backbone.zero_grad(set_to_none=True)
        outputs, _, _ = backbone.forward_sequence(segment, state, no_start)
        outputs.sum().backward()

    forward_backward()  # warm-up: allocator, position caches, first-call overheads
    return forward_backward


def loglog_slope(lengths: list[int], values: list[float]) -> float | None:
    """Least-squares slope of ``log value`` against ``log M``; ``None`` with fewer than two lengths."""
    if len(lengths) < 2:
        return None
    return statistics.linear_regression([math.log(m) for m in lengths], [math.log(v) for v in values]).slope


def measure(settings: Settings) -> list[dict[str, Any]]:
    runs, rows = {}, {}
    for member in members():
        for M in settings.lengths:
            backbone = build(member, M, settings)
            run = training_segment(backbone, settings)
            runs[(member, M)] = run
            saved = saved_activation_bytes(run, backbone.parameters())
            backbone.zero_grad(set_to_none=True)  # the peak then counts the gradients the pass allocates
            rows[(member, M)] = {"member": member, "memory_length": M, "saved_bytes": saved,
                                 "peak_bytes": peak_allocated_bytes(run), "rounds_ms": []}
        print(f"{member}: built and measured memory", file=sys.stderr, flush=True)
    for index in range(settings.rounds):  # every cell once per round: all see the same machine load
        for key, run in runs.items():
            rows[key]["rounds_ms"].append(time_block(run, settings.calls) / 1e3)
        print(f"round {index + 1}/{settings.rounds} done", file=sys.stderr, flush=True)
    for (_, M), row in rows.items():
        reference = rows[(REFERENCE, M)]["rounds_ms"]
        row["median_ms"] = statistics.median(row["rounds_ms"])
        row["ratio_to_reference"] = statistics.median(
            r / ref for r, ref in zip(row["rounds_ms"], reference, strict=True))
    return list(rows.values())


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per member: its options and the log-log slopes of time, saved and peak bytes against M."""
    out = []
    for member in dict.fromkeys(row["member"] for row in rows):
        mine = sorted((row for row in rows if row["member"] == member), key=lambda row: row["memory_length"])
        lengths = [row["memory_length"] for row in mine]
        out.append({"member": member,
                    "options": {} if member == LINEAR else ATTENTIONS.options(member),
                    "complexity": (CausalLinearAttention if member == LINEAR else ATTENTIONS[member].cls).complexity,
                    **{f"{quantity}_slope": loglog_slope(lengths, [row[quantity] for row in mine])
                       for quantity in ("median_ms", "saved_bytes", "peak_bytes")}})
    return out


def _options(options: dict[str, Any]) -> str:
    return ", ".join(f"{name}={'default' if value is None else value}" for name, value in options.items()) or "—"


def _slope(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def render(result: dict[str, Any]) -> str:
    s, rows = result["settings"], result["rows"]
    lengths = s["lengths"]
    cell = {(row["member"], row["memory_length"]): row for row in rows}
    lines = heading("Attention scaling: one training segment against memory length", result)
    if s["quick"]:
        lines += ["**Quick smoke run (`--quick`): tiny sizes, too few repetitions to report.**", ""]
    reference_ms = ", ".join(f"{cell[(REFERENCE, M)]['median_ms']:,.1f} ms at M = {M:,}" for M in lengths)
    lines += [f"{machine_line(result)} · {result['wall_seconds']:.0f} s", "",
              f"GTrXL, d_model {s['d_model']}, {s['n_layers']} layers, {s['n_heads']} heads, each attention with its "
              f"default options (`default`: a value that depends on M, see the attention catalogue); the `linear` "
              f"backbone likewise (its cost does not depend on M). One training segment: {s['n_envs']} envs × "
              f"T = {s['segment_length']} steps, memory window full, forward + backward of the outputs' sum, one torch "
              f"thread. Time: median over {s['rounds']} interleaved rounds of {s['calls']} calls of the ratio to "
              f"`{REFERENCE}` at the same M ({reference_ms}). Saved: bytes autograd keeps for backward (parameters "
              f"left out). Peak: most bytes allocated at once during forward and backward (torch.profiler memory "
              f"events). Slope: least-squares log-log slope against M. Claimed: the time its paper claims for a "
              f"sequence of n tokens; here each of the T queries scores all M + T keys densely and masks them (no "
              f"sparse, bucketed or blocked kernel), so every windowed member costs O(T·(M + T)) per segment, a "
              f"time slope towards 1, and only the recurrent `linear` form is flat in M.", ""]
    header = " | ".join(f"M = {M:,}" for M in lengths)
    rule = "|".join("---:" for _ in lengths)
    # (title, cell value, slope key, whether the paper's claimed complexity stands beside the slope)
    tables = [("Time, × `" + REFERENCE + "` at the same M", lambda row: f"{row['ratio_to_reference']:.2f}",
               "median_ms_slope", True),
              ("Saved for backward, MB", lambda row: f"{row['saved_bytes'] / 1e6:,.2f}", "saved_bytes_slope", False),
              ("Peak allocated, MB", lambda row: f"{row['peak_bytes'] / 1e6:,.2f}", "peak_bytes_slope", False)]
    for title, value, slope, with_claim in tables:
        lines += [f"## {title}", "", f"| attention | options | {header} | {'claimed | ' * with_claim}log-log slope |",
                  f"|---|---|{rule}|{'---|' * with_claim}---:|"]
        for entry in result["summary"]:
            member = entry["member"]
            values = " | ".join(value(cell[(member, M)]) for M in lengths)
            claim = f"{entry['complexity']} | " * with_claim
            lines.append(f"| `{member}` | {_options(entry['options'])} | {values} | {claim}{_slope(entry[slope])} |")
        lines.append("")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke test: M in {QUICK.lengths}, d_model {QUICK.d_model}, {QUICK.n_envs} envs × "
                             f"T = {QUICK.segment_length}, {QUICK.rounds} rounds of {QUICK.calls} call")
    parser.add_argument("--lengths", nargs="+", type=int, default=None,
                        help=f"memory lengths M (default {Settings.lengths}, {QUICK.lengths} with --quick)")
    parser.add_argument("--rounds", type=int, default=None, help=f"interleaved rounds (default {Settings.rounds})")
    parser.add_argument("--calls", type=int, default=None, help=f"calls per cell and round (default {Settings.calls})")
    parser.add_argument("--out", type=Path, default=RESULTS,
                        help="folder for attention_scaling.json and .md (default: benchmarks/results)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    base = QUICK if args.quick else Settings()
    settings = Settings(**{**asdict(base), "lengths": tuple(args.lengths or base.lengths),
                           "rounds": args.rounds or base.rounds, "calls": args.calls or base.calls})
    torch.set_num_threads(1)
    began, info = time.perf_counter(), machine_info()
    rows = measure(settings)
    result = {"benchmark": "attention_scaling", **provenance(), "wall_seconds": time.perf_counter() - began,
              "settings": asdict(settings), "machine": info, "rows": rows, "summary": summary(rows)}
    write_results("attention_scaling", result, render, args.out)
    return result


if __name__ == "__main__":
    main()
