"""Where one GTrXL forward pass runs: the library frames and functions a rollout step and a training segment enter.

It builds :class:`agents.MemoryPPO` with the default ``gtrxl`` backbone on ``RepeatPrevious-v0``, collects one
rollout (so the state and the minibatch are the learner's own), and records with :func:`sys.setprofile`

- **rollout step**: ``policy(obs, state, starts)`` under ``torch.inference_mode``, a step after the first of a
  rollout (the key/value caches already in the state);
- **training segment**: ``policy.evaluate_segments`` on a minibatch of ``MemoryRolloutBuffer.segments``.

Counted: named functions whose code lies in ``policies/`` (the library), each once, and the library frames on the
stack from the policy's entry down to the score, the frame that calls the softmax kernel
(``F.scaled_dot_product_attention`` or ``Tensor.softmax``). Results go to
``benchmarks/results/forward_trace.{json,md}`` (or ``--out``/``--name``).

Usage::

    .venv/bin/python benchmarks/forward_trace.py
    .venv/bin/python benchmarks/forward_trace.py --before old.json   # beside the counts of another checkout
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's library, not the one an editable install points at

import torch  # noqa: E402
from common import RESULTS, heading, machine_info, machine_line, provenance, write_results  # noqa: E402

LIBRARY = ROOT / "policies"


def _library(code: Any) -> str | None:
    path = Path(code.co_filename)
    return str(path.relative_to(ROOT)) if path.is_relative_to(LIBRARY) else None


def trace(call: Any) -> dict[str, Any]:
    """Every library function ``call`` enters (in the order first entered, each once) and the library frames on
    the stack when the score's softmax kernel is first called."""
    entered: dict[tuple[str, str], None] = {}
    to_score: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and not code.co_name.startswith("<"):  # comprehensions belong to their function
            file = _library(code)
            if file is not None:
                entered.setdefault((file, code.co_qualname), None)
        elif event == "c_call" and not to_score and getattr(arg, "__name__", None) in {"scaled_dot_product_attention",
                                                                                       "softmax"}:
            stack = []
            while frame is not None:
                if _library(frame.f_code) is not None and not frame.f_code.co_name.startswith("<"):
                    stack.append(frame.f_code.co_qualname)
                frame = frame.f_back
            to_score.extend(reversed(stack))

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    files: dict[str, list[str]] = {}
    for file, function in entered:
        files.setdefault(file, []).append(function)
    return {"n_frames": len(to_score), "frames": to_score, "n_functions": len(entered), "n_files": len(files),
            "files": files}


def learner_inputs(seed: int) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """A MemoryPPO with the default ``gtrxl`` after one rollout: the model, the arguments of a rollout step and
    those of a training segment."""
    from agents import MemoryPPO
    from envs import make_vec_env

    torch.manual_seed(seed)
    env = make_vec_env("RepeatPrevious-v0", n_envs=4, seed=seed)
    model = MemoryPPO("MemoryPolicy", env, n_steps=64, batch_size=256, segment_length=16, seed=seed,
                      policy_kwargs={"backbone": "gtrxl"}, device="cpu")
    model.learn(total_timesteps=64 * 4)  # one rollout and one update: the buffer holds the learner's rollout
    policy = model.policy
    batch = next(model.rollout_buffer.segments(model.batch_size, model.segment_length))
    segment = {"obs": batch.observations, "actions": batch.actions, "state": batch.states,
               "episode_starts": batch.episode_starts}
    with torch.inference_mode():  # one step fills the caches, as every step of a rollout but its first does
        obs = torch.as_tensor(model._last_obs)
        starts = torch.as_tensor(model._last_episode_starts).bool()
        state = policy(obs, model._last_state, starts).state
    return model, {"obs": obs, "state": state, "starts": torch.zeros_like(starts)}, segment


def measure(seed: int) -> dict[str, Any]:
    """The frames and functions of a rollout step and a training segment of the default ``gtrxl``."""
    import policies

    if not Path(policies.__file__).is_relative_to(ROOT):
        raise RuntimeError(f"policies imported from {policies.__file__}, not from {ROOT}")
    model, step, segment = learner_inputs(seed)
    policy = model.policy

    def rollout_step() -> None:
        with torch.inference_mode():
            policy(step["obs"], step["state"], step["starts"])

    def training_segment() -> None:
        policy.evaluate_segments(segment["obs"], segment["actions"], segment["state"], segment["episode_starts"])

    passes = {name: trace(call) for name, call in (("rollout step", rollout_step),
                                                   ("training segment", training_segment))}
    settings = {"backbone": "gtrxl", "backbone_kwargs": dict(policy.backbone_kwargs), "env": "RepeatPrevious-v0",
                "n_envs": 4, "segment_length": 16, "batch_size": 256, "seed": seed}
    return {**provenance(), "machine": machine_info(), "settings": settings, "passes": passes}


def markdown(result: dict[str, Any]) -> str:
    settings = result["settings"]
    lines = heading("One GTrXL forward pass: library frames and functions entered", result)
    lines += [machine_line(result), "",
              f"Default `gtrxl` in MemoryPPO on {settings['env']}: a rollout step (`policy(obs, state, starts)`, "
              f"caches in the state) and a training segment (`policy.evaluate_segments` on a minibatch of "
              f"{settings['batch_size']} steps in segments of {settings['segment_length']}). Frames: library "
              "frames from the policy down to the one that calls the softmax kernel. Functions: named functions "
              "whose code lies in `policies/`, each once.", "",
              "| pass | frames to the score | functions | files |", "|---|---:|---:|---:|"]
    before = result.get("before")
    for name, p in result["passes"].items():
        was = before["passes"].get(name) if before else None
        cells = [f"{was[key]} → {p[key]}" if was else str(p[key]) for key in ("n_frames", "n_functions", "n_files")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if before:
        lines += ["", f"Before → after: `--before` names the counts of another checkout (measured {before['date']})."]
    for name, p in result["passes"].items():
        lines += ["", f"## {name}", "", "Frames: " + " → ".join(f"`{f}`" for f in p["frames"]), ""]
        lines += [f"- `{file}` ({len(functions)}): " + ", ".join(f"`{f}`" for f in functions)
                  for file, functions in p["files"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="forward_trace", help="results file name (<out>/<name>.{json,md})")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory of the results files")
    parser.add_argument("--before", type=Path, help="the JSON of another checkout, shown beside these counts")
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = measure(args.seed)
    if args.before is not None:
        result["before"] = json.loads(args.before.read_text())
    write_results(args.name, result, markdown, args.out)
    for name, p in result["passes"].items():
        print(f"{name}: {p['n_frames']} frames to the score, {p['n_functions']} functions, {p['n_files']} files")


if __name__ == "__main__":
    main()
