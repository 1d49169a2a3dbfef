"""Validation bits per character of the LM variants, with and without memory, and against evaluation memory.

Every backbone of ``--backbones`` (default TrXL, TrXL-I, GTrXL and the
Universal Transformer with ACT) and every attention of ``--attentions`` inside GTrXL (the efficient
members) is trained by the LM workbench (:func:`lm.workbench.train_lm`) on the byte-level
``python`` corpus (the standard library's sources, every tenth file held out), once per training memory
length of ``--memory-lengths`` (default 128, "with memory", and 8, a context of eight bytes), all with
the same budget: ``--steps`` segments of 16 rows × 64 bytes, d_model 128, 2 layers (``ut-act``: up to
2 ponder steps of one shared block), 4 heads, learning rate 5e-4, seed 0, one torch thread per run.

Reported per run: validation bits per byte against bytes seen (the runs' ``evaluations.csv``), the
final value, the training throughput in bytes per second (the run's training loop, its periodic
validations included; an interrupted and resumed run counts only its last part) and, for the backbones
trained with the longest memory and their default attention (``relative``, which has no parameter that
depends on the memory length), the bits per byte when the trained model is evaluated with each memory
length of ``--eval-memory-lengths``. The attention variants are left out of that table: Linformer's
projections have ``M + 1`` columns, and ``local``'s default window is ``M/8``.

Runs are kept under ``--log-dir``; a run that finished there before is read, not retrained, so an
interrupted benchmark resumes. Usage::

    .venv/bin/python benchmarks/lm_memory.py                         # ≈ 25 min on 2 cores
    .venv/bin/python benchmarks/lm_memory.py --quick --out /tmp/lm   # smoke test, seconds
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import sys
from pathlib import Path
from typing import Any

import torch
from common import RESULTS, heading, machine_info, machine_line, provenance, write_results

from lm.workbench import LMConfig, evaluate_run, train_lm

BACKBONE_OPTIONS: dict[str, dict[str, Any]] = {
    "ut-act": {"d_model": 128, "n_heads": 4, "max_steps": 2},
}
"""options per backbone beyond the memory length; any other backbone gets :data:`STACK_OPTIONS`"""

STACK_OPTIONS = {"d_model": 128, "n_layers": 2, "n_heads": 4}


def cell_config(backbone: str, attention: str | None, memory_length: int, args: argparse.Namespace) -> LMConfig:
    """The LM settings of one cell; its run directory tells backbone, attention and memory apart."""
    options = {**BACKBONE_OPTIONS.get(backbone, STACK_OPTIONS), "memory_length": memory_length}
    if attention is not None:
        options["attention"] = attention
    name = f"{backbone}{'-' + attention if attention else ''}_m{memory_length}"
    return LMConfig(data="python", backbone=backbone, backbone_options=options, steps=args.steps,
                    eval_every=max(1, args.steps // args.evaluations), checkpoint_every=args.steps,
                    eval_segments=args.eval_segments, max_bytes=args.max_bytes, threads=1,
                    log_dir=str(args.log_dir / name))


def run_cell(config: LMConfig) -> dict[str, Any]:
    """Train one cell (or read it, if it finished before) and return its curve and throughput."""
    summary_file = config.directory() / "summary.json"
    if summary_file.exists():
        summary = json.loads(summary_file.read_text())
    else:
        summary = train_lm(config, resume=(config.directory() / "config.yaml").exists())
    tokens_per_step = config.batch_size * config.segment_length
    with (config.directory() / "evaluations.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    curve = [(int(row["step"]) * tokens_per_step, float(row["valid_bits_per_token"])) for row in rows]
    return {"run": str(config.directory()), "backbone": config.backbone,
            "attention": config.backbone_options.get("attention", "relative"),
            "memory_length": config.backbone_options["memory_length"], "parameters": summary["parameters"],
            "bytes_seen": summary["tokens"], "final_bits": summary["valid_bits_per_token"],
            "bytes_per_second": summary["tokens"] / float(rows[-1]["wall_seconds"]),
            "curve": curve}


def eval_memory(run: str, lengths: list[int], segments: int) -> dict[int, float]:
    """Bits per byte of a trained run evaluated with each memory length."""
    torch.set_num_threads(1)
    return {length: evaluate_run(Path(run), length, segments)[2] for length in lengths}


def render(result: dict[str, Any]) -> str:
    lines = heading("Language models: bits per byte with and without memory", result)
    lines += [machine_line(result), "", result["settings_line"], "",
              "| backbone | attention | train memory | parameters | final bits/byte | bytes/s "
              "| bits/byte along training |",
              "|---|---|---:|---:|---:|---:|---|"]
    for cell in result["cells"]:
        curve = ", ".join(f"{tokens / 1e6:.2f}M: {bits:.3f}" for tokens, bits in cell["curve"])
        lines.append(f"| {cell['backbone']} | {cell['attention']} | {cell['memory_length']} | {cell['parameters']:,} | "
                     f"**{cell['final_bits']:.3f}** | {cell['bytes_per_second']:,.0f} | {curve} |")
    lengths = result["eval_memory_lengths"]
    if lengths:
        lines += ["", f"Evaluation memory (runs trained with memory {max(result['memory_lengths'])}, default "
                  "attention): bits per byte when the trained weights are evaluated with another memory length.", "",
                  "| backbone | attention | " + " | ".join(f"M = {m}" for m in lengths) + " |",
                  "|---|---|" + "---:|" * len(lengths)]
        for cell in result["cells"]:
            if "eval_memory" in cell:
                values = " | ".join(f"{cell['eval_memory'][str(m)]:.3f}" for m in lengths)
                lines.append(f"| {cell['backbone']} | {cell['attention']} | {values} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbones", nargs="+", default=["trxl", "trxl-i", "gtrxl", "ut-act"])
    parser.add_argument("--attentions", nargs="*", default=["local", "alibi", "linformer"],
                        help="attentions trained inside GTrXL beside its default (relative)")
    parser.add_argument("--memory-lengths", type=int, nargs="+", default=[128, 8])
    parser.add_argument("--eval-memory-lengths", type=int, nargs="*", default=[32, 128, 256, 512])
    parser.add_argument("--steps", type=int, default=1000, help="training segments of 16 x 64 bytes per run")
    parser.add_argument("--evaluations", type=int, default=5, help="validations along training")
    parser.add_argument("--eval-segments", type=int, default=32, help="validation segments per evaluation")
    parser.add_argument("--max-bytes", type=int, default=4_000_000, help="bytes of the corpus read")
    parser.add_argument("--workers", type=int, default=2, help="runs trained at once, one torch thread each")
    parser.add_argument("--log-dir", type=Path, default=Path("runs/lm_memory"))
    parser.add_argument("--quick", action="store_true", help="a few steps of two small cells (smoke test)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--name", default="lm")
    args = parser.parse_args(argv)
    if args.quick:
        args.backbones, args.attentions, args.steps, args.evaluations = ["trxl"], [], 4, 2
        args.memory_lengths, args.eval_memory_lengths, args.eval_segments, args.max_bytes = [16, 4], [8, 32], 2, 200_000
    result: dict[str, Any] = {**provenance(), "machine": machine_info(),
                              "memory_lengths": args.memory_lengths, "eval_memory_lengths": args.eval_memory_lengths}
    result["machine"]["torch_threads"] = 1
    result["settings_line"] = (f"`python` corpus (byte level, {args.max_bytes:,} bytes read), {args.steps:,} "
                               f"segments of 16 × 64 bytes per run, {args.eval_segments} validation segments per "
                               f"evaluation, seed 0, {args.workers} runs at once with one torch thread each.")
    cells = [(backbone, None) for backbone in args.backbones] + [("gtrxl", name) for name in args.attentions]
    configs = [cell_config(backbone, attention, length, args) for backbone, attention in cells
               for length in args.memory_lengths]
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        measured = pool.map(run_cell, configs, chunksize=1)
        longest = [cell for cell in measured  # the attention variants' options may depend on M (linformer's E, F)
                   if cell["memory_length"] == max(args.memory_lengths) and cell["attention"] == "relative"]
        evaluated = pool.starmap(eval_memory, [(cell["run"], args.eval_memory_lengths, args.eval_segments)
                                               for cell in longest], chunksize=1)
    for cell, bits in zip(longest, evaluated, strict=True):
        cell["eval_memory"] = {str(length): value for length, value in bits.items()}
    result["cells"] = measured
    write_results(args.name, result, render, args.out)
    print(render(result), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
