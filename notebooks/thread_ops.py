"""The cost of one parallel torch op against the thread count and OpenMP's wait policy, as the machine is and
with one more core held by a spinning process: the mechanism under notebooks/threads.py's training speeds.

Two ops of the size a memory model's update runs: ``tanh`` over 262,144 floats (a batch of 256 segments of 16
steps × d_model 64) and a (4096 × 64) @ (64 × 64) matmul. One process per wait policy (OpenMP reads
``OMP_WAIT_POLICY`` once); inside it, interleaved rounds over threads × load, microseconds per op averaged over
``--repeats`` calls.

Usage::

    .venv/bin/python notebooks/thread_ops.py          # under a minute on 2 idle cores
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from common import heading, machine_info, machine_line, provenance, write_results

SPIN = "while True:\n    pass\n"
OPS = ("tanh_262k", "matmul_4096x64x64")


def per_call(function: Callable[[], Any], repeats: int) -> float:
    """Microseconds per call, after one warm-up call."""
    function()
    started = time.perf_counter()
    for _ in range(repeats):
        function()
    return (time.perf_counter() - started) / repeats * 1e6


def worker(rounds: int, repeats: int) -> list[dict[str, Any]]:
    """Every (threads, load) once per round, in this process's wait policy."""
    import torch

    x, a, b = torch.randn(262_144), torch.randn(4096, 64), torch.randn(64, 64)
    ops = {"tanh_262k": lambda: torch.tanh(x), "matmul_4096x64x64": lambda: a @ b}
    rows = []
    for round_index in range(rounds):
        for load in ("none", "busy"):
            for threads in (1, 2):
                torch.set_num_threads(threads)
                spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if load == "busy" else None
                try:
                    row = {name: round(per_call(op, repeats), 1) for name, op in ops.items()}
                finally:
                    if spinner is not None:
                        spinner.kill()
                        spinner.wait()
                rows.append({"round": round_index, "load": load, "threads": threads, **row,
                             "load_average": round(os.getloadavg()[0], 2)})
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = heading("One parallel op against torch threads and the OpenMP wait policy", result)
    lines += [machine_line(result), "",
              f"Microseconds per call (mean of {result['repeats']} calls), median over {result['rounds']} rounds. "
              "Load `as is`: the machine as other users left it; `+1 busy`: one more process spinning.", "",
              "| OMP_WAIT_POLICY | load | threads | " + " | ".join(f"{op} µs" for op in OPS) + " |",
              "|---|---|---:|" + "---:|" * len(OPS)]
    for row in result["table"]:
        load = "as is" if row["load"] == "none" else "+1 busy"
        cells = " | ".join(f"{row[op]:,.0f}" for op in OPS)
        lines.append(f"| {row['wait_policy']} | {load} | {row['threads']} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--name", default="thread_ops", help="results file name")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.rounds, args.repeats)))
        return
    rows = []
    for policy in ("default", "PASSIVE"):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if policy != "default":
            env["OMP_WAIT_POLICY"] = policy
        command = [sys.executable, __file__, "--worker", "--rounds", str(args.rounds), "--repeats", str(args.repeats)]
        output = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
        rows += [{**row, "wait_policy": policy} for row in json.loads(output)]
    keys = sorted({(r["wait_policy"], r["load"], r["threads"]) for r in rows})
    table = [{"wait_policy": p, "load": load, "threads": t,
              **{op: statistics.median(r[op] for r in rows if (r["wait_policy"], r["load"], r["threads"]) ==
                                       (p, load, t)) for op in OPS}} for p, load, t in keys]
    result = {**provenance(), "machine": machine_info(), "rounds": args.rounds, "repeats": args.repeats,
              "rows": rows, "table": table}
    write_results(args.name, result, markdown)


if __name__ == "__main__":
    main()
