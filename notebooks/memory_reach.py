"""Rollout step cost against memory reach, for every long-memory member.

Reach is how far back a step can see: ``M`` for a windowed Transformer, the local window for
``local`` attention, the whole store ``M`` for ``knn`` (its local window stays at 64) and for
``compressive`` (64 steps one by one, the rest in mean-pooled blocks of 4), and the whole
episode for the recurrent ``linear`` backbone (elu and Performer features) and the LSTM. Each
member is timed at several store sizes ``M`` (16 envs, ``d_model = 128``, 2 layers, one torch
thread): microseconds per cached rollout step from a full window, in interleaved rounds, with
``common.time_block``; reported with the ratio to GTrXL at ``M = 64`` timed in the same
rounds, and the bytes of memory state the rollout buffer stores per env step (a window record).

Usage::

    .venv/bin/python notebooks/memory_reach.py            # a few minutes on 2 cores
    .venv/bin/python notebooks/memory_reach.py --quick --out /tmp/reach   # smoke test
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from common import RESULTS, BackboneSize, heading, machine_info, machine_line, provenance, time_block, write_results

from policies import make_backbone
from policies.backbone import MemoryBackbone

LOCAL_WINDOW = 64
MEMBERS: dict[str, tuple[str, dict[str, Any]]] = {
    "gtrxl": ("gtrxl", {}),
    "gtrxl local": ("gtrxl", {"attention": "local", "attention_options": {"local_window": LOCAL_WINDOW}}),
    "gtrxl knn": ("gtrxl", {"attention": "knn", "attention_options": {"local_window": LOCAL_WINDOW}}),
    "gtrxl compressive": ("gtrxl", {"attention": "compressive",
                                    "attention_options": {"fifo_length": LOCAL_WINDOW, "compression_rate": 4}}),
    "linear": ("linear", {}),
    "linear favor (m = 64)": ("linear", {"feature_map": "favor", "n_features": 64}),
    "lstm": ("lstm", {}),
}
"""member → (backbone, options); the windowed ones are timed at every M, the others once"""
WINDOWED = ("gtrxl", "gtrxl local", "gtrxl knn", "gtrxl compressive")
REFERENCE = ("gtrxl", 64)


@dataclass
class Settings(BackboneSize):
    memory_lengths: tuple[int, ...] = (64, 256, 1024)
    rounds: int = 7
    calls: int = 200
    seed: int = 0


def reach(member: str, memory_length: int) -> int | None:
    """Steps back a rollout step can see; ``None``: the whole episode."""
    if member == "gtrxl local":
        return min(LOCAL_WINDOW, memory_length)
    return memory_length if member in WINDOWED else None


def build(member: str, memory_length: int, settings: Settings) -> MemoryBackbone:
    name, extra = MEMBERS[member]
    options: dict[str, Any] = {"n_layers": settings.n_layers}
    if name == "lstm":
        options["hidden_size"] = settings.d_model
    else:
        options.update(d_model=settings.d_model, n_heads=settings.n_heads, **extra)
    if name == "gtrxl":
        options["memory_length"] = memory_length
    torch.manual_seed(settings.seed)
    return make_backbone(name, settings.input_dim, **options).eval()


def cells(settings: Settings) -> list[tuple[str, int]]:
    return [(member, M) for member in MEMBERS for M in (settings.memory_lengths if member in WINDOWED
                                                         else settings.memory_lengths[:1])]


def stepper(backbone: MemoryBackbone, memory_length: int, settings: Settings):
    """A closure doing one cached rollout step from a state whose window is full."""
    B = settings.n_envs
    generator = torch.Generator().manual_seed(settings.seed + 1)
    history = torch.randn(memory_length, B, settings.input_dim, generator=generator)
    pool = torch.randn(64, B, settings.input_dim, generator=generator)
    starts = torch.zeros(memory_length, B, dtype=torch.bool)
    starts[0] = True
    no_start = torch.zeros(B, dtype=torch.bool)
    with torch.inference_mode():
        _, state, _ = backbone.forward_sequence(history, backbone.initial_state(B), starts)
    carried = {"state": state, "t": 0}

    def step() -> None:
        with torch.inference_mode():
            _, carried["state"] = backbone.step(pool[carried["t"] % len(pool)], carried["state"], no_start)
        carried["t"] += 1

    for _ in range(3):
        step()
    return step


def measure(settings: Settings) -> list[dict[str, Any]]:
    torch.set_num_threads(1)
    steps, rows = {}, {}
    for member, M in cells(settings):
        backbone = build(member, M, settings)
        steps[(member, M)] = stepper(backbone, M, settings)
        record = math.prod(backbone.record_shape) * 4
        rows[(member, M)] = {"member": member, "memory_length": M if member in WINDOWED else None,
                             "reach": reach(member, M), "record_bytes": record, "rounds_us": []}
    for _ in range(settings.rounds):  # every cell once per round: all see the same machine load
        for key, step in steps.items():
            rows[key]["rounds_us"].append(time_block(step, settings.calls))
    reference = rows[REFERENCE]["rounds_us"]
    for row in rows.values():
        row["median_us"] = statistics.median(row["rounds_us"])
        row["ratio_to_reference"] = statistics.median(
            r / ref for r, ref in zip(row["rounds_us"], reference, strict=True))
    return list(rows.values())


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [*heading("Step cost against memory reach", result), machine_line(result), "",
             f"{s['n_envs']} envs, d_model {s['d_model']}, {s['n_layers']} layers, {s['n_heads']} heads, one torch "
             f"thread; {s['rounds']} interleaved rounds of {s['calls']} cached rollout steps from a full window. "
             f"Ratio: median over rounds of this cell's time over GTrXL's at M = 64 in the same round. "
             f"Record: the memory-state bytes the rollout buffer stores per env step.", "",
             "| member | M (store) | reach (steps back) | µs/step (median) | × GTrXL M = 64 | record bytes/step |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        reach_cell = "episode" if row["reach"] is None else f"{row['reach']:,}"
        store = "—" if row["memory_length"] is None else f"{row['memory_length']:,}"
        lines.append(f"| {row['member']} | {store} | {reach_cell} | {row['median_us']:,.0f} | "
                     f"{row['ratio_to_reference']:.2f} | {row['record_bytes']:,} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="M in {64, 128}, 2 rounds of 20 calls")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    settings = Settings(memory_lengths=(64, 128), rounds=2, calls=20) if args.quick else Settings()
    result = {**provenance(), "machine": machine_info(), "settings": asdict(settings), "rows": measure(settings)}
    write_results("memory_reach", result, render, args.out)


if __name__ == "__main__":
    main()
