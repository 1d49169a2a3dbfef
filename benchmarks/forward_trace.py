"""Where one GTrXL forward pass runs: the library files and functions a rollout step and a training segment enter.

The target of issue 28 is a GTrXL a newcomer can follow in at most three files. This script counts them. It
builds :class:`agents.MemoryPPO` with the default ``gtrxl`` backbone on ``RepeatPrevious-v0``, collects one
rollout (so the state and the minibatch are the learner's own), and then records, with :func:`sys.setprofile`,
every Python function entered during

- **rollout step**: ``backbone.step(features, state["pi"], starts)``, as
  :meth:`policies.policy.MemoryActorCriticPolicy.forward` calls it during a rollout (under
  ``torch.inference_mode``, the key/value caches already in the state: a step after the first of a rollout);
- **training segment**: ``backbone.forward_outputs(features, backbone.segment_state(state["pi"]), starts)``,
  as :meth:`~policies.policy.MemoryActorCriticPolicy.evaluate_segments` calls it on a minibatch of
  ``MemoryRolloutBuffer.segments`` (with gradient).

"Library" is the model package ``policies/``: the functions counted are those whose code lies there; the
SB3 policy around the backbone (``policies/policy.py``'s two callers) is listed apart, as are comprehensions
(``<genexpr>`` and the like, which are expressions of the function that holds them, not functions a reader
follows). Results go to ``benchmarks/results/forward_trace.{json,md}`` (or ``--out``/``--name``).

Usage::

    .venv/bin/python benchmarks/forward_trace.py                     # a few seconds
    .venv/bin/python benchmarks/forward_trace.py --name forward_trace_before
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's library, not the one an editable install points at

import torch  # noqa: E402
from common import RESULTS, heading, machine_info, machine_line, provenance, write_results  # noqa: E402

LIBRARY = ROOT / "policies"


def trace(call: Callable[[], Any]) -> list[tuple[str, str]]:
    """``(file relative to the repository, qualified name)`` of every library function ``call`` enters, in the
    order first entered (each once)."""
    entered: dict[tuple[str, str], None] = {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_name.startswith("<"):  # a comprehension or generator expression, part of its function
            return
        path = Path(code.co_filename)
        if path.is_relative_to(LIBRARY):
            entered.setdefault((str(path.relative_to(ROOT)), code.co_qualname), None)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return list(entered)


def learner_inputs(seed: int) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """A MemoryPPO with the default ``gtrxl`` after one rollout: the model, the arguments of a rollout step's
    backbone call and those of a training segment's."""
    from agents import MemoryPPO
    from envs import make_vec_env

    torch.manual_seed(seed)
    env = make_vec_env("RepeatPrevious-v0", n_envs=4, seed=seed)
    model = MemoryPPO("MemoryPolicy", env, n_steps=64, batch_size=256, segment_length=16, seed=seed,
                      policy_kwargs={"backbone": "gtrxl"}, device="cpu")
    model.learn(total_timesteps=64 * 4)  # one rollout and one update: the buffer holds the learner's rollout
    policy = model.policy
    batch = next(model.rollout_buffer.segments(model.batch_size, model.segment_length))
    T, N = batch.episode_starts.shape
    segment = {"x": policy.extract_features(batch.observations).view(T, N, -1),
               "state": batch.states["pi"], "episode_starts": batch.episode_starts}
    with torch.inference_mode():  # one step fills the caches, as every step of a rollout but its first does
        obs = torch.as_tensor(model._last_obs)
        starts = torch.as_tensor(model._last_episode_starts).bool()
        state = policy(obs, model._last_state, starts).state
        step = {"x": policy.extract_features(obs), "state": state["pi"], "episode_start": torch.zeros_like(starts)}
    return model, step, segment


def measure(seed: int) -> dict[str, Any]:
    """The functions and files of a rollout step and a training segment of the default ``gtrxl``."""
    import policies

    if not Path(policies.__file__).is_relative_to(ROOT):
        raise RuntimeError(f"policies imported from {policies.__file__}, not from {ROOT}")
    model, step, segment = learner_inputs(seed)
    backbone = model.policy.backbone

    def rollout_step() -> None:
        with torch.inference_mode():
            backbone.step(step["x"], step["state"], step["episode_start"])

    def training_segment() -> None:
        backbone.forward_outputs(segment["x"], backbone.segment_state(segment["state"]), segment["episode_starts"])

    passes = {}
    for name, call in (("rollout step", rollout_step), ("training segment", training_segment)):
        functions = trace(call)
        files: dict[str, list[str]] = {}
        for file, function in functions:
            files.setdefault(file, []).append(function)
        passes[name] = {"n_files": len(files), "n_functions": len(functions), "files": files}
    settings = {"backbone": "gtrxl", "backbone_kwargs": dict(model.policy.backbone_kwargs), "env": "RepeatPrevious-v0",
                "n_envs": 4, "segment_length": 16, "batch_size": 256, "seed": seed,
                "state_form": "shared records" if "records" in segment["state"] else "windows"}
    return {**provenance(), "machine": machine_info(), "settings": settings, "passes": passes}


def markdown(result: dict[str, Any]) -> str:
    settings = result["settings"]
    lines = heading("One GTrXL forward pass: library files and functions entered", result)
    lines += [machine_line(result), "",
              f"Default `gtrxl` (`{settings['backbone_kwargs'] or 'no options'}`) in MemoryPPO on "
              f"{settings['env']}: a rollout step (`backbone.step`, caches in the state) and a training segment "
              f"(`backbone.forward_outputs` on a minibatch of {settings['batch_size']} steps in segments of "
              f"{settings['segment_length']}, state as {settings['state_form']}). Counted: named functions whose "
              "code lies in `policies/` (the library), each once.", "",
              "| pass | files | functions |", "|---|---:|---:|"]
    lines += [f"| {name} | {p['n_files']} | {p['n_functions']} |" for name, p in result["passes"].items()]
    for name, p in result["passes"].items():
        lines += ["", f"## {name}", ""]
        lines += [f"- `{file}` ({len(functions)}): " + ", ".join(f"`{f}`" for f in functions)
                  for file, functions in p["files"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="forward_trace", help="results file name (<out>/<name>.{json,md})")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory of the results files")
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = measure(args.seed)
    write_results(args.name, result, markdown, args.out)
    for name, p in result["passes"].items():
        print(f"{name}: {p['n_files']} files, {p['n_functions']} functions")


if __name__ == "__main__":
    main()
