"""Retrieval for a trained language model: kNN-LM's interpolation and SPALM's gated read against the LM alone.

From a finished LM run (``train_rl.py lm train``), a datastore of
(final hidden state, next token) pairs is built from the first ``--datastore-segments`` training
segments (:func:`lm.workbench.build_datastore`). Then, on the run's validation segments:

- the LM alone;
- kNN-LM (Khandelwal et al. 2020) with each ``--weights`` λ: ``p = λ p_kNN + (1 − λ) p_LM``;
- SPALM's gated read (Yogatama et al. 2021, :class:`policies.lm.spalm.GatedRetrieval`), its gate trained
  for ``--gate-segments`` training segments that follow the datastore's, with the LM frozen;
- with ``--lm-lr`` > 0 (default 5e-4, the LM's own rate), SPALM with the LM fine-tuned together with
  the gate (the paper's setting), beside the LM fine-tuned alone on the same segments (the control:
  more training alone also lowers the bits).

All use the ``--k`` nearest neighbours, searched exactly. Usage::

    .venv/bin/python benchmarks/lm_retrieval.py runs/lm_memory/gtrxl_m128/python__lm-gtrxl__0
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path
from typing import Any

import torch
from common import RESULTS, heading, machine_info, machine_line, provenance, write_results

from lm.workbench import (
    KNNSettings,
    SPALMSettings,
    bits_per_token,
    build_datastore,
    fine_tune,
    load_run,
    spalm_bits,
)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    config, model = load_run(args.run)
    train, valid = config.stream("train"), config.stream("validation")
    n_segments = args.segments or config.eval_segments
    began = time.perf_counter()
    datastore = build_datastore(model, train, config, args.datastore_segments)
    datastore_seconds = time.perf_counter() - began
    rows: list[dict[str, Any]] = [{"method": "LM alone", "bits": bits_per_token(model, valid, config, n_segments)}]
    for weight in args.weights:
        began = time.perf_counter()
        bits = bits_per_token(model, valid, config, n_segments, KNNSettings(datastore, args.k, weight))
        rows.append({"method": f"kNN-LM, λ = {weight}", "weight": weight, "bits": bits,
                     "seconds": time.perf_counter() - began})
    spalm = SPALMSettings(datastore, args.k, args.gate_lr)
    variants = [("SPALM, LM frozen", 0.0, spalm)]
    if args.lm_lr > 0:  # the paper's joint training, and its control: the LM alone on the same segments
        variants += [("LM fine-tuned alone", args.lm_lr, None),
                     ("SPALM, LM fine-tuned with the gate", args.lm_lr, spalm)]
    for method, lm_lr, settings in variants:
        tuned = copy.deepcopy(model)
        began = time.perf_counter()
        retrieval, losses = fine_tune(tuned, train, config, args.gate_segments, args.datastore_segments, lm_lr,
                                      settings)
        row = {"method": method, "lm_lr": lm_lr, "training_seconds": time.perf_counter() - began,
               "losses_first_last": [losses[0], losses[-1]]}
        began = time.perf_counter()
        if retrieval is None:
            row["bits"] = bits_per_token(tuned, valid, config, n_segments)
        else:
            row["bits"], row["mean_gate"] = spalm_bits(tuned, retrieval, valid, config, n_segments, datastore, args.k)
        rows.append({**row, "seconds": time.perf_counter() - began})
    return {"run": str(args.run), "data": config.data, "backbone": config.backbone,
            "backbone_options": config.backbone_options, "validation_segments": n_segments,
            "segment_tokens": config.segment_length * config.batch_size, "datastore_tokens": len(datastore),
            "datastore_seconds": datastore_seconds, "k": args.k, "gate_segments": args.gate_segments,
            "gate_lr": args.gate_lr, "lm_lr": args.lm_lr, "rows": rows}


def render(result: dict[str, Any]) -> str:
    lines = heading("Retrieval for a trained language model: kNN-LM and SPALM", result)
    lines += [f"{machine_line(result)} · {result['wall_seconds']:.0f} s", "",
              f"Run `{result['run']}` (data `{result['data']}`, backbone `{result['backbone']}`, "
              f"{result['backbone_options']}). Datastore: the first {result['datastore_tokens']:,} training tokens "
              f"({result['datastore_seconds']:.0f} s to build), exact search for the k = {result['k']} nearest. "
              f"SPALM's gate: trained on the next {result['gate_segments']} training segments of "
              f"{result['segment_tokens']:,} tokens (Adam, lr {result['gate_lr']}), with the LM frozen, or with the "
              f"LM fine-tuned too (lr {result['lm_lr']}), beside the LM fine-tuned alone on the same segments (the "
              f"control). kNN-LM reads the LM as trained. Evaluated on "
              f"{result['validation_segments']} validation segments.", "",
              "| method | bits per token | mean gate (the LM's share) | seconds to evaluate |", "|---|---:|---:|---:|"]
    for row in result["rows"]:
        gate = f"{row['mean_gate']:.3f}" if "mean_gate" in row else "—"
        seconds = f"{row['seconds']:.0f}" if "seconds" in row else "—"
        lines.append(f"| {row['method']} | {row['bits']:.4f} | {gate} | {seconds} |")
    lines += ["", "Training (seconds; loss on the first and the last segment, nats per token):", ""]
    for row in result["rows"]:
        if "training_seconds" in row:
            first, last = row["losses_first_last"]
            lines.append(f"- {row['method']}: {row['training_seconds']:.0f} s, {first:.3f} → {last:.3f}")
    return "\n".join([*lines, ""])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished LM run directory")
    parser.add_argument("--k", type=int, default=32, help="neighbours per token (32)")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.1, 0.25, 0.5], help="kNN-LM's λ values")
    parser.add_argument("--datastore-segments", type=int, default=256, help="training segments in the datastore")
    parser.add_argument("--gate-segments", type=int, default=200, help="training segments for SPALM's gate")
    parser.add_argument("--gate-lr", type=float, default=0.01, help="the gate's Adam learning rate")
    parser.add_argument("--lm-lr", type=float, default=5e-4,
                        help="also fine-tune the LM, with the gate and alone (the control), at this learning rate "
                             "(0: only the frozen-LM gate)")
    parser.add_argument("--segments", type=int, default=None, help="validation segments (the run's eval_segments)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    parser.add_argument("--name", default="lm_retrieval", help="results file name")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder of the results files")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    began, info = time.perf_counter(), machine_info()
    result = {"benchmark": "lm_retrieval", **provenance(), "machine": info, **measure(args)}
    result["wall_seconds"] = time.perf_counter() - began
    write_results(args.name, result, render, args.out)
    return result


if __name__ == "__main__":
    main()
