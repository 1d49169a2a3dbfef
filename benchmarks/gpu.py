"""Training steps/s on a GPU against the CPU: default GTrXL, GRU and MLP at 1 to 1,024 envs, rollouts on the device.

T-Maze-20 runs as a torch env on the device (`envs.torch_tasks`), so a rollout keeps observations, actions and
rewards there (``MemoryOnPolicyAlgorithm._collect_on_device``). Each cell builds MemoryPPO with its defaults
(64 steps per rollout, 4 epochs, segments of 16) and a minibatch scaled with the envs, ``256 · n_envs / 16`` (16
minibatches per epoch, as the default's 16 × 64 / 256; capped by the rollout), trains one warm-up rollout, then
``--rollouts`` rollouts timed: steps/s of wall time, split into rollout and update (the device synchronised at
every phase boundary), and steps per CPU-second of the process. The CPU baseline (one torch thread unless
``--cpu-threads``) runs the same cells in the same run. On CUDA, ``--graph`` also times the default GTrXL at the
largest size with its rollout step compiled by ``torch.compile(mode="reduce-overhead")`` (CUDA graphs); a failed
capture is reported, not fatal.

Usage (the repository and its installed requirements only; under 10 minutes on one GPU)::

    python benchmarks/gpu.py                       # device: cuda when available, else cpu
    python benchmarks/gpu.py --graph               # plus the CUDA-graph rollout step
    python benchmarks/gpu.py --device cpu --quick  # smoke run without a GPU: 1 and 4 envs, one rollout; prints
                                                   # its results and writes none (unless --name or --out)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from common import heading, machine_info, machine_line, print_results, provenance, results_target, write_results
from stable_baselines3.common.callbacks import BaseCallback
from torch.utils._pytree import tree_map

from agents import MemoryPPO
from envs.torch_tasks import make_torch_vec_env
from policies.policy import PolicyState
from policies.window import strip_cache

BACKBONES = ("gtrxl", "gru", "mlp")
SIZES = (1, 16, 256, 1024)
QUICK_SIZES = (1, 4)
N_STEPS = 64
QUICK_N_STEPS = 16


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class DevicePhases(BaseCallback):
    """Wall time collecting rollouts, the device synchronised at each boundary (the rest of ``learn`` updates)."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.collecting = 0.0
        self._began = 0.0

    def _on_rollout_start(self) -> None:
        synchronize(self.device)
        self._began = time.perf_counter()

    def _on_rollout_end(self) -> None:
        synchronize(self.device)
        self.collecting += time.perf_counter() - self._began

    def _on_step(self) -> bool:
        return True


def build(backbone: str, n_envs: int, n_steps: int, device: torch.device) -> MemoryPPO:
    env = make_torch_vec_env("TMaze-v0", n_envs, seed=0, device=device, length=20)
    batch_size = min(256 * max(1, n_envs // 16), n_steps * n_envs)
    return MemoryPPO("MemoryPolicy", env, n_steps=n_steps, batch_size=batch_size, seed=0, device=device,
                     policy_kwargs={"backbone": backbone})


def capture(model: MemoryPPO) -> None:
    """Compile the policy's rollout step for CUDA graphs (compiled at its first call)."""
    compiled = torch.compile(model.policy.forward, mode="reduce-overhead", dynamic=False)

    def replay(obs: torch.Tensor, state: PolicyState, *args: Any, **kwargs: Any) -> Any:
        # the key/value cache is dropped (its generation number would recompile the step after every update), and a
        # graph's outputs live in its memory pool until the next replay: the state and values read later are copied
        state = PolicyState(*(s if s is None else strip_cache(s) for s in state))
        model.policy.invalidate_caches()  # the position terms are computed in the graph, not kept from a replay
        torch.compiler.cudagraph_mark_step_begin()
        step = compiled(obs, state, *args, **kwargs)
        return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, step)

    model.policy.forward = replay


def measure(backbone: str, n_envs: int, device: torch.device, n_steps: int, rollouts: int,
            graph: bool = False) -> dict[str, Any]:
    steps = n_steps * n_envs
    try:
        model = build(backbone, n_envs, n_steps, device)
        if graph:
            capture(model)
        began = time.perf_counter()
        model.learn(steps)  # warm-up (and compilation)
        warm_up = time.perf_counter() - began
        phases = DevicePhases(device)
        synchronize(device)
        began, cpu = time.perf_counter(), time.process_time()
        model.learn(rollouts * steps, callback=phases, reset_num_timesteps=False)
        synchronize(device)
    except Exception as error:  # noqa: BLE001 - a failed cell is reported in the results, the others run
        print(f"{device} {backbone} {n_envs} envs failed: {error!r}", file=sys.stderr, flush=True)
        return {"backbone": backbone, "n_envs": n_envs, "device": str(device), "graph": graph,
                "error": f"{type(error).__name__}: {error}"[:300]}
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    row = {"backbone": backbone, "n_envs": n_envs, "device": str(device), "graph": graph,
           "batch_size": model.batch_size, "steps": rollouts * steps, "steps_per_s": rollouts * steps / wall,
           "steps_per_cpu_s": rollouts * steps / cpu,
           "rollout_s": phases.collecting, "update_s": wall - phases.collecting, "warm_up_s": warm_up}
    print(f"{device} {backbone:6s} {n_envs:5d} envs{' graph' if graph else ''}: "
          f"{row['steps_per_s']:9.0f} steps/s", file=sys.stderr, flush=True)
    return row


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [*heading("Training steps/s on the device against the CPU", result), machine_line(result), ""]
    if not result["gpu_available"]:
        lines += ["**No GPU was available for this run**: it ran on the CPU only, a smoke run of the script.", ""]
    else:
        lines += [f"GPU: {result['gpu_name']}.", ""]
    lines += [f"T-Maze-20 as a torch env on the device, MemoryPPO defaults ({s['n_steps']} steps per rollout, 4 "
              "epochs, segments of 16), minibatch `256 · n_envs / 16` (at most the rollout); one warm-up rollout, "
              f"then {s['rollouts']} timed. CPU: {s['cpu_threads']} torch thread(s). × CPU: the same backbone and "
              "envs on the CPU in this run.", "",
              "| device | backbone | envs | minibatch | steps/s | steps/CPU-s | × CPU | rollout s | update s | "
              "rollout share |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cpu = {(r["backbone"], r["n_envs"]): r["steps_per_s"] for r in result["rows"]
           if r["device"] == "cpu" and "steps_per_s" in r}
    for r in result["rows"]:
        name = r["backbone"] + (" (CUDA graph step)" if r.get("graph") else "")
        if "steps_per_s" not in r:
            error = r["error"].replace("\n", " ").replace("|", "/")
            lines.append(f"| {r['device']} | {name} | {r['n_envs']} | — | failed: {error} | | | | | |")
            continue
        base = cpu.get((r["backbone"], r["n_envs"]))
        ratio = f"{r['steps_per_s'] / base:.1f}" if base and r["device"] != "cpu" else "—"
        total = r["rollout_s"] + r["update_s"]
        lines.append(f"| {r['device']} | {name} | {r['n_envs']:,} | {r['batch_size']:,} | {r['steps_per_s']:,.0f} | "
                     f"{r['steps_per_cpu_s']:,.0f} | {ratio} | {r['rollout_s']:.2f} | {r['update_s']:.2f} | "
                     f"{r['rollout_s'] / total:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", type=int, nargs="+", help=f"env counts (default {SIZES})")
    parser.add_argument("--backbones", nargs="+", default=list(BACKBONES))
    parser.add_argument("--rollouts", type=int, default=2, help="timed rollouts per cell")
    parser.add_argument("--cpu-threads", type=int, default=1)
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU baseline")
    parser.add_argument("--graph", action="store_true", help="on CUDA: also the CUDA-graph rollout step")
    parser.add_argument("--quick", action="store_true", help="1 and 4 envs, 16-step rollouts, one timed rollout")
    parser.add_argument("--name", help="results file name (default: gpu; --quick writes only given --name or --out)")
    parser.add_argument("--out", type=Path, help="directory of the results files (default: benchmarks/results)")
    args = parser.parse_args(argv)
    target = results_target(args.quick, args.name, args.out, "gpu")
    torch.set_num_threads(args.cpu_threads)
    device = torch.device(args.device)
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    n_steps, rollouts = (QUICK_N_STEPS, 1) if args.quick else (N_STEPS, args.rollouts)
    cells = [(b, n, device, False) for b in args.backbones for n in sizes]
    if args.graph and device.type == "cuda":
        cells.append(("gtrxl", max(sizes), device, True))
    if device.type != "cpu" and not args.no_cpu:
        cells += [(b, n, torch.device("cpu"), False) for b in args.backbones for n in sizes]
    result: dict[str, Any] = {
        **provenance(), "machine": machine_info(), "gpu_available": torch.cuda.is_available(),
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "settings": {"n_steps": n_steps, "rollouts": rollouts, "sizes": list(sizes), "cpu_threads": args.cpu_threads,
                     "device": str(device)},
        "rows": []}
    for backbone, n_envs, on, graph in cells:  # the results are rewritten after each cell: a cut run keeps its rows
        result["rows"].append(measure(backbone, n_envs, on, n_steps, rollouts, graph))
        if target is not None:
            name, out = target
            write_results(name, result, render, out)
    if target is None:
        print_results(result, render)
    return result


if __name__ == "__main__":
    main()
