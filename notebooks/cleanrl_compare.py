"""Training speed side by side: engram against CleanRL's PPO-TrXL on CleanRL's MiniGrid-MemoryS9 set-up.

Both sides train the same number of env steps on the same set-up, each in a fresh process, in
interleaved rounds (engram, CleanRL, engram, CleanRL, ...), with the same torch thread count
(``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` for both, and engram's ``--threads``). The machine is
shared and noisy, so what counts is the ratio within a round: the report gives every round's
env-steps/s and ratio engram/CleanRL, and their median, min and max.

engram runs ``train_rl.py --config configs/minigrid_memory_s9_cleanrl.yaml`` in this venv. CleanRL
runs its own, unmodified ``ppo_trxl.py`` as a third-party program in a venv of its own (gymnasium
0.29, minigrid 2.5, memory-gym 1.0.2; ``notebooks/cleanrl_setup.sh`` builds it outside the repo).
Its arguments are derived from the engram config (env, envs, steps per rollout, minibatches, epochs,
layers, heads, width, memory length, PPO coefficients); the report lists where that set-up differs
from CleanRL's documented MemoryS9 command, apart from the budget.

What is timed, the same on both sides: the training loop, from just before the first env reset to
the end of the last update, i.e. without interpreter start-up, imports, env and model construction
and anything after training. engram: ``steps_per_second`` of the run's ``summary.json`` (env steps
over the wall time of ``learn``). CleanRL: the ``SPS=`` of its last log line (global step over the
wall time since its ``start_time``, printed after each update; an integer). The whole process's wall
time, start-up included, is recorded as well (``process_steps_per_second``).

Usage::

    bash notebooks/cleanrl_setup.sh /work/cleanrl     # once: CleanRL's script and its venv, outside the repo
    .venv/bin/python notebooks/cleanrl_compare.py \\
        --cleanrl-python /work/cleanrl/.venv/bin/python --cleanrl-script /work/cleanrl/ppo_trxl.py
    # smoke run (one round of one rollout each), results outside the repo:
    .venv/bin/python notebooks/cleanrl_compare.py --steps 4096 --rounds 1 --out /tmp/cc \\
        --cleanrl-python /work/cleanrl/.venv/bin/python --cleanrl-script /work/cleanrl/ppo_trxl.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from common import RESULTS, heading, machine_info, machine_line, provenance, write_results

from agents import PRECISIONS
from experiments.config import RunConfig, build_config
from experiments.training import torch_threads

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "configs/minigrid_memory_s9_cleanrl.yaml"
TARGET_RATIO = 1.5
CLEANRL_ENV_KWARGS = {"obs": "rgb", "agent_view_size": 3, "tile_size": 28, "max_episode_steps": 96}
"""what ``ppo_trxl.py`` hard-codes for MiniGrid ids (its ``make_env``): 84x84 RGB, view 3, TimeLimit 96"""
DOCUMENTED = {
    "env-id": "MiniGrid-MemoryS9-v0", "total-timesteps": "2048000", "num-envs": "16", "num-steps": "256",
    "num-minibatches": "8", "update-epochs": "3", "trxl-num-layers": "2", "trxl-num-heads": "4",
    "trxl-dim": "256", "trxl-memory-length": "64", "max-grad-norm": "0.25", "anneal-steps": "4096000",
    "clip-coef": "0.2", "init-lr": "0.000275", "gamma": "0.995", "gae-lambda": "0.95", "vf-coef": "0.5",
    "init-ent-coef": "0.0001", "norm-adv": "false", "clip-vloss": "true",
}
"""CleanRL's documented MemoryS9 command (docs/rl-algorithms/ppo-trxl.md) with the script's defaults for
the flags it leaves out. The docs command lacks a backslash after ``--anneal_steps``, so typed as shown
its ``--clip_coef 0.2`` is lost and the default 0.1 applies; here 0.2 is passed explicitly."""
BUDGET_FLAGS = {"total-timesteps"}
SPS_LINE = re.compile(r"^\s*(\d+)\s+SPS=\s*(\d+)\b", re.MULTILINE)


def same_number(a: str, b: str) -> bool:
    """Flag values compared as numbers where both are numbers (``2.75e-4`` equals ``0.000275``)."""
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def learning_rate_start(value: Any) -> float:
    """The initial rate of an engram learning rate: a number, or a schedule of the progress remaining."""
    return float(value(1.0)) if callable(value) else float(value)


def check_env(config: RunConfig) -> None:
    """CleanRL builds its MiniGrid envs one way only; the engram config must build the same."""
    if config.env_kwargs != CLEANRL_ENV_KWARGS:
        raise SystemExit(f"{config.env} env_kwargs {config.env_kwargs} differ from what ppo_trxl.py builds "
                         f"for MiniGrid ids: {CLEANRL_ENV_KWARGS}")


def cleanrl_arguments(config: RunConfig, steps: int, seed: int) -> dict[str, str]:
    """``ppo_trxl.py``'s flags (without ``--``) for the set-up of the engram ``config``, over ``steps``."""
    ppo, backbone = config.algo_options(), config.backbone_options()
    batch = config.n_envs * ppo["n_steps"]
    if batch % ppo["batch_size"]:
        raise SystemExit(f"batch size {ppo['batch_size']} does not divide the rollout of {batch} steps")
    flags = {
        "env-id": config.env, "seed": seed, "total-timesteps": steps, "num-envs": config.n_envs,
        "num-steps": ppo["n_steps"], "num-minibatches": batch // ppo["batch_size"], "update-epochs": ppo["n_epochs"],
        "trxl-num-layers": backbone["n_layers"], "trxl-num-heads": backbone["n_heads"],
        "trxl-dim": backbone["d_model"], "trxl-memory-length": backbone["memory_length"],
        "max-grad-norm": ppo["max_grad_norm"], "anneal-steps": DOCUMENTED["anneal-steps"],
        "clip-coef": ppo["clip_range"], "init-lr": learning_rate_start(ppo["learning_rate"]),
        "gamma": ppo["gamma"], "gae-lambda": ppo["gae_lambda"], "vf-coef": ppo["vf_coef"],
        "init-ent-coef": ppo["ent_coef"], "norm-adv": ppo["normalize_advantage"],
        "clip-vloss": ppo["clip_range_vf"] is not None, "cuda": False,
    }
    return {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in flags.items()}


def documented_differences(flags: dict[str, str]) -> list[str]:
    """Where ``flags`` depart from CleanRL's documented MemoryS9 run, the budget aside."""
    return [f"--{key} {flags.get(key, '(unset)')} (documented: {value})" for key, value in DOCUMENTED.items()
            if key not in BUDGET_FLAGS and not same_number(flags.get(key, ""), value)]


def check_steps(steps: int, config: RunConfig) -> None:
    """Both sides must train exactly ``steps``: CleanRL runs ``steps // rollout`` whole rollouts."""
    rollout = config.n_envs * config.algo_options()["n_steps"]
    if steps <= 0 or steps % rollout:
        raise SystemExit(f"--steps {steps}: must be a positive multiple of the rollout, {rollout} env steps")


def cleanrl_command(python: str, script: str, flags: dict[str, str]) -> list[str]:
    """The CleanRL command line; booleans become tyro's ``--name`` / ``--no-name``."""
    command = [python, "-u", script]
    for key, value in flags.items():
        if value in ("true", "false"):
            command.append(f"--{key}" if value == "true" else f"--no-{key}")
        else:
            command += [f"--{key}", value]
    return command


def engram_command(args: argparse.Namespace, log_dir: str) -> list[str]:
    """The engram command line: the training command of docs/benchmarks/speed.md, with no evaluation or checkpoint
    during it."""
    return [sys.executable, "train_rl.py", "--config", args.config, "--total-timesteps", str(args.steps),
            "--threads", str(args.threads), "--precision", args.precision, "--seed", str(args.seed),
            "--log-dir", log_dir, "--eval-freq", "0", "--checkpoint-freq", "0", "--n-eval-episodes", "1"]


def thread_env(threads: int) -> dict[str, str]:
    """This process's environment with both thread counts set to ``threads``."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def parse_cleanrl_output(text: str, rollout: int) -> dict[str, int]:
    """Iterations, env steps and the SPS of CleanRL's last log line (``  3 SPS= 176 return=...``)."""
    matches = SPS_LINE.findall(text)
    if not matches:
        raise ValueError("no 'SPS=' line in CleanRL's output:\n" + text[-2000:])
    iteration, sps = (int(x) for x in matches[-1])
    return {"iterations": iteration, "env_steps": iteration * rollout, "steps_per_second": sps}


def run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[str, float]:
    """Run ``command``; its stdout and stderr, and its wall time. A failure stops the benchmark."""
    began = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    if done.returncode:
        tail = (done.stdout + done.stderr)[-4000:]
        raise SystemExit(f"{shlex.join(command)} failed ({done.returncode}):\n{tail}")
    return done.stdout + done.stderr, wall


def engram_round(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    log_dir = work / f"engram_{time.time_ns()}"
    _, wall = run(engram_command(args, str(log_dir)), ROOT, thread_env(args.threads))
    summary = json.loads(next(log_dir.glob("*/summary.json")).read_text())
    if summary["env_steps"] != args.steps:
        raise SystemExit(f"engram trained {summary['env_steps']} env steps, not {args.steps}")
    return {"steps_per_second": summary["steps_per_second"], "process_steps_per_second": args.steps / wall,
            "torch_threads": summary["torch_threads"], "parameters": summary["parameters"]}


def cleanrl_round(command: list[str], steps: int, rollout: int, threads: int, work: Path) -> dict[str, Any]:
    cwd = work / f"cleanrl_{time.time_ns()}"  # its tensorboard events go to ./runs
    cwd.mkdir()
    output, wall = run(command, cwd, thread_env(threads))
    parsed = parse_cleanrl_output(output, rollout)
    if parsed["env_steps"] != steps:
        raise SystemExit(f"CleanRL trained {parsed['env_steps']} env steps, not {steps}")
    return {"steps_per_second": float(parsed["steps_per_second"]), "process_steps_per_second": steps / wall}


PROBE = """
import json, sys, gymnasium, minigrid, numpy, torch
info = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "gymnasium": gymnasium.__version__, "minigrid": minigrid.__version__, "numpy": numpy.__version__}
try:
    from importlib.metadata import version
    info["memory_gym"] = version("memory-gym")
except Exception as error:
    info["memory_gym"] = repr(error)
print(json.dumps(info))
"""


def cleanrl_versions(python: str, script: str, threads: int) -> dict[str, Any]:
    """Versions in CleanRL's venv, its torch threads under the benchmark's environment, the script's hash."""
    output, _ = run([python, "-c", PROBE], ROOT, thread_env(threads))
    info = json.loads(output.strip().splitlines()[-1])
    info["script"] = script
    info["script_sha256"] = hashlib.sha256(Path(script).read_bytes()).hexdigest()
    return info


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-round ratios engram/CleanRL (training loop and whole process) and their median, min and max."""
    def spread(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    ratios = [r["engram"]["steps_per_second"] / r["cleanrl"]["steps_per_second"] for r in rounds]
    process = [r["engram"]["process_steps_per_second"] / r["cleanrl"]["process_steps_per_second"] for r in rounds]
    return {
        "ratio": spread(ratios), "process_ratio": spread(process),
        "engram_steps_per_second": spread([r["engram"]["steps_per_second"] for r in rounds]),
        "cleanrl_steps_per_second": spread([r["cleanrl"]["steps_per_second"] for r in rounds]),
        "target_ratio": TARGET_RATIO, "target_met": statistics.median(ratios) >= TARGET_RATIO,
    }


def measure(args: argparse.Namespace, config: RunConfig, cleanrl: list[str], work: Path) -> list[dict[str, Any]]:
    rollout = config.n_envs * config.algo_options()["n_steps"]
    rounds = []
    for index in range(args.rounds):
        load = list(os.getloadavg())
        engram = engram_round(args, work)
        peer = cleanrl_round(cleanrl, args.steps, rollout, args.threads, work)
        rounds.append({"round": index, "load_average_at_start": load, "engram": engram, "cleanrl": peer,
                       "ratio": engram["steps_per_second"] / peer["steps_per_second"]})
        print(f"round {index}: engram {engram['steps_per_second']:.1f} steps/s, CleanRL "
              f"{peer['steps_per_second']:.0f} steps/s, ratio {rounds[-1]['ratio']:.2f}", flush=True)
    return rounds


def _loads(loads: list[float]) -> str:
    return "/".join(f"{x:.1f}" for x in loads)


def round_row(r: dict[str, Any]) -> str:
    """One round as a Markdown table row."""
    engram, peer = r["engram"], r["cleanrl"]
    process = engram["process_steps_per_second"] / peer["process_steps_per_second"]
    return (f"| {r['round']} | {engram['steps_per_second']:,.1f} | {peer['steps_per_second']:,.0f} | "
            f"{r['ratio']:.2f} | {process:.2f} | {_loads(r['load_average_at_start'])} |")


def versions_line(result: dict[str, Any]) -> str:
    v = result["cleanrl_versions"]
    return (f"CleanRL side: torch {v['torch']}, gymnasium {v['gymnasium']}, minigrid {v['minigrid']}, "
            f"memory-gym {v['memory_gym']}, {v['torch_threads']} torch thread(s); `ppo_trxl.py` sha256 "
            f"`{v['script_sha256'][:16]}…`. engram side: gymnasium {result['machine']['gymnasium']}.")


def target_line(summary: dict[str, Any], precision: str) -> str:
    ratio = summary["ratio"]
    met = "met" if summary["target_met"] else "not met"
    if precision != "fp32":
        met += f" with engram's update in {precision} (CleanRL computes in float32; the target is for fp32)"
    return (f"**Target: engram ≥ {summary['target_ratio']}× CleanRL (median of per-round ratios, same threads): "
            f"{met}** — median {ratio['median']:.2f}× (range {ratio['min']:.2f}–{ratio['max']:.2f}).")


def render(result: dict[str, Any]) -> str:
    s, summary = result["settings"], result["summary"]
    lines = [
        *heading("Training speed: engram against CleanRL's PPO-TrXL (MiniGrid-MemoryS9)", result),
        machine_line(result), "", versions_line(result), "",
        f"engram: `{result['engram_command']}`", "", f"CleanRL: `{result['cleanrl_command']}`", "",
        f"{s['steps']:,} env steps per run, {s['rounds']} interleaved rounds, {s['threads']} thread(s) on both "
        "sides (`OMP_NUM_THREADS`, `MKL_NUM_THREADS`, engram `--threads`). Timed: the training loop, from "
        "before the first env reset to the end of the last update (engram: `summary.json` steps_per_second; "
        "CleanRL: the `SPS=` of its last log line, an integer). `process` is the whole process's wall time: it "
        "adds interpreter start-up, set-up and teardown (engram: one evaluation episode and saving the model).", "",
        target_line(summary, s.get("precision", "fp32")), "",
        "| round | engram steps/s | CleanRL steps/s | ratio | process ratio | load at start |",
        "|---:|---:|---:|---:|---:|---|",
        *(round_row(r) for r in result["rounds"]), "",
        f"Median: engram {summary['engram_steps_per_second']['median']:,.1f}, CleanRL "
        f"{summary['cleanrl_steps_per_second']['median']:,.0f} steps/s; ratio {summary['ratio']['median']:.2f}× "
        f"(process {summary['process_ratio']['median']:.2f}×).", "", "## Set-up", "",
    ]
    differences = result["documented_differences"]
    listed = "; ".join(f"`{d}`" for d in differences) if differences else "none"
    lines += [f"Departures from CleanRL's documented MemoryS9 command (budget aside): {listed}. "
              f"engram's model has {result['rounds'][0]['engram']['parameters']:,} parameters.", ""]
    lines += [f"- {note}" for note in result["notes"]]
    return "\n".join(lines) + "\n"


NOTES = [
    "CleanRL's docs command lacks a backslash after `--anneal_steps`, so typed as shown it drops "
    "`--clip_coef 0.2` (script default 0.1); both sides here use 0.2.",
    "Learning rate: both start at 2.75e-4. CleanRL anneals towards 1e-5 over 4.096M steps (`--anneal-steps`), "
    "engram's schedule `lin_2.75e-4_1.42e-4` spans the run's budget, so in a short benchmark run engram's "
    "rate falls faster. Rates do not change the work per step.",
    "Models are not identical (see the config's header): engram's trxl-i uses relative positions "
    "(CleanRL: absolute), a two-layer position-wise MLP (d_inner 256; CleanRL: one d→d layer), an input "
    "projection d→d after the Nature CNN's 256 features (CleanRL feeds those to the first layer), full d×d "
    "query/key/value projections (CleanRL: one 64×64 projection shared by the heads) and separate "
    "actor/critic heads of 256 (CleanRL: one shared 256 layer). CleanRL's Agent has 1,237,672 parameters "
    "at these sizes (counted from the script at commit fe8d8a0); engram's count is in every round's record.",
    "Both recompute every step's window in the update from the records stored during the rollout "
    "(CleanRL: cached hidden states; engram: segment_length 1).",
]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl-python", required=True, help="python of CleanRL's own venv (cleanrl_setup.sh)")
    parser.add_argument("--cleanrl-script", required=True, help="CleanRL's cleanrl/ppo_trxl/ppo_trxl.py")
    parser.add_argument("--config", default=CONFIG, help="engram's side of the set-up")
    parser.add_argument("--steps", type=int, default=12_288, help="env steps per run, a multiple of the rollout")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=torch_threads(0), help="torch threads, both sides")
    parser.add_argument("--seed", type=int, default=1, help="seed of both sides (CleanRL's default)")
    parser.add_argument("--precision", choices=list(PRECISIONS), default="fp32",
                        help="engram's update precision (--precision of train_rl.py); results of a precision other "
                             "than fp32 go to cleanrl_compare_<precision>.{json,md}")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory of cleanrl_compare.{json,md}")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)  # so that machine_info records the benchmark's thread count
    config = build_config(ROOT / args.config)
    check_env(config)
    check_steps(args.steps, config)
    flags = cleanrl_arguments(config, args.steps, args.seed)
    cleanrl = cleanrl_command(args.cleanrl_python, str(Path(args.cleanrl_script).resolve()), flags)
    result: dict[str, Any] = {**provenance(), "machine": machine_info(),
                              "settings": {"steps": args.steps, "rounds": args.rounds, "threads": args.threads,
                                           "seed": args.seed, "config": args.config, "precision": args.precision},
                              "cleanrl_versions": cleanrl_versions(args.cleanrl_python, args.cleanrl_script,
                                                                   args.threads),
                              "engram_command": shlex.join(engram_command(args, "<tmp>")),
                              "cleanrl_command": shlex.join(cleanrl), "cleanrl_flags": flags,
                              "documented_differences": documented_differences(flags), "notes": NOTES}
    with tempfile.TemporaryDirectory(prefix="cleanrl_compare_") as work:
        result["rounds"] = measure(args, config, cleanrl, Path(work))
    result["summary"] = summarise(result["rounds"])
    name = "cleanrl_compare" if args.precision == "fp32" else f"cleanrl_compare_{args.precision}"
    write_results(name, result, render, out=args.out)


if __name__ == "__main__":
    main()
