"""The cost of one PPO update with each stored record projected once, against per-window projection.

One MemoryPPO learner per cell collects one rollout; then its ``train()`` (every epoch and
minibatch of one update) is timed with the backbone taking shared records
(``shares_records = True``: each distinct record of a minibatch normalised and projected once,
:func:`policies.window.shared_windows`) and with the windows rebuilt per sample
(``shares_records = False``: every window's records projected, the scheme before), with
shuffled minibatches and with ``by-env`` ones (whole envs, whose windows overlap). Both modes
see the same rollout and the same parameters (they are restored before every timed update), and
alternate round after round in one process, so the ratio within a round is what counts on a
shared, noisy machine.

Usage::

    .venv/bin/python benchmarks/update_cost.py            # a few minutes on 2 cores
    .venv/bin/python benchmarks/update_cost.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import copy
import itertools
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch
from common import heading, machine_info, machine_line, provenance, write_results

from agents import MemoryPPO
from envs import make_vec_env
from policies import memory


@dataclass
class Settings:
    env: str = "TMaze-v0"
    length: int = 30
    n_envs: int = 16
    n_steps: int = 128
    batch_size: int = 512
    n_epochs: int = 1
    d_model: int = 64
    memory_length: int = 64
    segment_lengths: tuple[int, ...] = (1, 16)
    layers: tuple[int, ...] = (1, 2)
    orders: tuple[str, ...] = ("shuffled", "by-env")
    rounds: int = 5
    threads: int = 1
    min_share: float = memory.SHARED_RECORDS_MIN


def learner(s: Settings, n_layers: int, segment_length: int, order: str) -> MemoryPPO:
    """A GTrXL learner with one collected rollout in its buffer."""
    env = make_vec_env(s.env, n_envs=s.n_envs, seed=0, length=s.length)
    model = MemoryPPO("MemoryPolicy", env, n_steps=s.n_steps, batch_size=s.batch_size, n_epochs=s.n_epochs,
                      segment_length=segment_length, minibatch_order=order, seed=0,
                      policy_kwargs={"backbone": "gtrxl", "backbone_kwargs": {
                          "d_model": s.d_model, "n_layers": n_layers, "memory_length": s.memory_length}})
    _, callback = model._setup_learn(s.n_steps * s.n_envs, None)
    model.collect_rollouts(model.env, callback, model.rollout_buffer, s.n_steps)
    return model


def timed_update(model: MemoryPPO, shared: bool, snapshot: dict[str, Any]) -> float:
    """Seconds of one ``train()`` from the parameters and optimizer state of ``snapshot``."""
    model.policy.load_state_dict(snapshot["policy"])
    model.policy.optimizer.load_state_dict(snapshot["optimizer"])
    model.policy.backbone.shares_records = shared
    torch.manual_seed(0)
    start = time.perf_counter()
    model.train()
    return time.perf_counter() - start


def measure(s: Settings) -> list[dict[str, Any]]:
    cells = []
    for n_layers, T, order in itertools.product(s.layers, s.segment_lengths, s.orders):
        model = learner(s, n_layers, T, order)
        snapshot = {"policy": copy.deepcopy(model.policy.state_dict()),
                    "optimizer": copy.deepcopy(model.policy.optimizer.state_dict())}
        timed_update(model, True, snapshot)  # warm-up
        rounds = []
        for _ in range(s.rounds):
            windows = timed_update(model, False, snapshot)
            shared = timed_update(model, True, snapshot)
            rounds.append({"windows_s": windows, "shared_s": shared, "speedup": windows / shared})
        speedups = [r["speedup"] for r in rounds]
        cells.append({"n_layers": n_layers, "segment_length": T, "order": order,
                      "windows_s": statistics.median(r["windows_s"] for r in rounds),
                      "shared_s": statistics.median(r["shared_s"] for r in rounds),
                      "speedup": statistics.median(speedups), "range": [min(speedups), max(speedups)],
                      "rounds": rounds})
        print(f"layers {n_layers} T {T} {order}: ×{cells[-1]['speedup']:.2f}", flush=True)
    return cells


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        *heading("Update cost: each record projected once vs per window", result), machine_line(result), "",
        f"GTrXL (d_model {s['d_model']}, memory {s['memory_length']}) on `{s['env']}` (length {s['length']}), "
        f"{s['n_envs']} envs × {s['n_steps']} steps, batch {s['batch_size']}, {s['n_epochs']} epoch(s). "
        f"Each cell: median over {s['rounds']} interleaved rounds of one `train()`; speed-up = median "
        "of per-round ratios (range). Records are shared when a minibatch's windows hold at least "
        f"{s.get('min_share', 6.0):g} slots per distinct record (`SHARED_RECORDS_MIN`; 0: always); below that "
        "both modes project every window.", "",
        "| layers | segment length T | minibatch order | per-window projection s | records projected once s "
        "| speed-up | range |",
        "|---:|---:|---|---:|---:|---:|---|",
    ]
    for c in result["cells"]:
        lines.append(f"| {c['n_layers']} | {c['segment_length']} | {c['order']} | {c['windows_s']:.2f} | "
                     f"{c['shared_s']:.2f} | "
                     f"{c['speedup']:.2f} | {c['range'][0]:.2f}–{c['range'][1]:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: small rollout, one round")
    parser.add_argument("--d-model", type=int, default=Settings.d_model, help="GTrXL width")
    parser.add_argument("--min-share", type=float, default=Settings.min_share,
                        help="window slots per distinct record from which records are shared "
                             "(policies.window.SHARED_RECORDS_MIN; 0: always, to time sharing where it is off)")
    parser.add_argument("--name", default="update_cost", help="results file name")
    args = parser.parse_args()
    settings = Settings(d_model=args.d_model, min_share=args.min_share)
    if args.quick:
        settings = Settings(n_steps=16, batch_size=64, rounds=1, segment_lengths=(1, 4), layers=(1,),
                            orders=("by-env",), d_model=args.d_model, min_share=args.min_share)
    torch.set_num_threads(settings.threads)
    memory.SHARED_RECORDS_MIN = settings.min_share
    result: dict[str, Any] = {**provenance(), "machine": machine_info(), "settings": asdict(settings)}
    result["cells"] = measure(settings)
    if not args.quick:
        write_results(args.name, result, render)
    else:
        print(render({**result, "machine": {**result["machine"], "load_average_at_end": [0, 0, 0]}}))


if __name__ == "__main__":
    main()
