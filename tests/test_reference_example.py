"""The single-file reference ``examples/gtrxl_ppo_reference.py`` computes what the library computes.

Given the library's weights (mapped by :func:`reference_state_dict`), the reference gives the same
logits and values as the library's rollout steps and as its training segments, and the same PPO loss
as MemoryPPO's update on a collected rollout (to 1e-5). The fixed batches have several envs, segments
longer than the memory, episode starts inside segments and memory carried across rollouts.

Mutations these catch: dropping the gate bias ``b_g`` from the reference (all three fail); dropping
the relative shift (the segment and loss tests: for a one-step query the shift is the identity);
dropping the uniform-KL barrier, the clipping, or the unbiased std of advantage normalisation, or a
window that ignores episode starts (the loss test).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv
from torch import Tensor

from agents import MemoryPPO
from policies.policy import PolicyState
from policies.window import Window

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "gtrxl_ppo_reference.py"
ATOL = 1e-5
CORRIDORS = (3, 4, 5)  # one T-Maze per env: episodes of 4, 5 and 6 steps start at different times


@pytest.fixture(scope="module")
def ref() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gtrxl_ppo_reference", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def args(ref: ModuleType) -> Any:
    # M = 4 and segments of 8: every segment is longer than the memory; one minibatch, one epoch
    return ref.Args(n_envs=len(CORRIDORS), n_steps=24, segment_length=8, batch_size=72, n_epochs=1,
                    d_model=16, n_layers=2, n_heads=2, memory_length=4, ent_coef=0.01)


def make_library(ref: ModuleType, args: Any, seed: int = 0) -> MemoryPPO:
    env = DummyVecEnv([lambda length=length: ref.TMaze(length) for length in CORRIDORS])
    backbone = {"d_model": args.d_model, "n_layers": args.n_layers, "n_heads": args.n_heads,
                "memory_length": args.memory_length, "gate_bias": args.gate_bias}
    return MemoryPPO("MemoryPolicy", env, n_steps=args.n_steps, batch_size=args.batch_size,
                     segment_length=args.segment_length, n_epochs=args.n_epochs, gamma=args.gamma,
                     gae_lambda=args.gae_lambda, clip_range=args.clip_range, ent_coef=args.ent_coef,
                     vf_coef=args.vf_coef, uniform_kl_coef=args.uniform_kl_coef, seed=seed,
                     advantage_scale_decay=args.advantage_scale_decay,
                     policy_kwargs={"backbone": "gtrxl", "backbone_kwargs": backbone,
                                    "net_arch": {"pi": [args.hidden] * 2, "vf": [args.hidden] * 2}})


RENAMES = [  # library key (regex) → reference key
    (r"backbone\.embed\.", "embed."),
    (r"backbone\.layers\.(\d+)\.attn\.q_net\.", r"blocks.\1.attn.q."),
    (r"backbone\.layers\.(\d+)\.attn\.kv_net\.", r"blocks.\1.attn.kv."),
    (r"backbone\.layers\.(\d+)\.attn\.out_net\.", r"blocks.\1.attn.out."),
    (r"backbone\.layers\.(\d+)\.attn\.position\.r_net\.", r"blocks.\1.attn.r."),
    (r"backbone\.layers\.(\d+)\.attn\.position\.u$", r"blocks.\1.attn.u"),
    (r"backbone\.layers\.(\d+)\.attn\.position\.position_bias$", r"blocks.\1.attn.v"),
    (r"backbone\.layers\.(\d+)\.ff\.net\.0\.", r"blocks.\1.ff.0."),
    (r"backbone\.layers\.(\d+)\.ff\.net\.3\.", r"blocks.\1.ff.2."),
    (r"backbone\.layers\.(\d+)\.(attn|ff)_norm\.", r"blocks.\1.\2_norm."),
    (r"backbone\.layers\.(\d+)\.(attn|ff)_gate\.bias$", r"blocks.\1.\2_gate.b_g"),
    (r"backbone\.layers\.(\d+)\.(attn|ff)_gate\.u_g\.", r"blocks.\1.\2_gate.U_g."),
    (r"mlp_extractor\.policy_net\.", "actor."),
    (r"action_net\.", "actor.4."),
    (r"mlp_extractor\.value_net\.", "critic."),
    (r"value_net\.", "critic.4."),
]
FUSED = {"w_rzg": ("W_r", "W_z", "W_g"), "u_rz": ("U_r", "U_z")}  # the library's fused gate matrices


def reference_state_dict(library: dict[str, Tensor]) -> dict[str, Tensor]:
    """The library policy's state dict under the reference's names (fused gate matrices split)."""
    mapped = {}
    for key, value in library.items():
        fused = re.fullmatch(r"backbone\.layers\.(\d+)\.(attn|ff)_gate\.(w_rzg|u_rz)\.weight", key)
        if fused:
            n, gate, name = fused.groups()
            for part, chunk in zip(FUSED[name], value.chunk(len(FUSED[name]), dim=0), strict=True):
                mapped[f"blocks.{n}.{gate}_gate.{part}.weight"] = chunk
            continue
        for pattern, replacement in RENAMES:
            if re.match(pattern, key):
                mapped[re.sub(pattern, replacement, key)] = value
                break
        else:
            raise KeyError(f"no reference name for library parameter {key}")
    return mapped


def reference_agent(ref: ModuleType, args: Any, library: dict[str, Tensor]) -> torch.nn.Module:
    agent = ref.Agent(2, 4, args)
    agent.load_state_dict(reference_state_dict(library))  # strict: every reference parameter is set
    return agent


def replay(ref: ModuleType, agent: torch.nn.Module, obs: Tensor, starts: Tensor, memory: Tensor,
           valid: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The reference stepped through ``obs`` ``[S, E, 2]`` as a rollout: logits, values, records, and the
    window after the last step."""
    logits, values, records = [], [], []
    with torch.no_grad():
        for t in range(len(obs)):
            step_logits, value, record = agent(obs[t][None], memory, valid, starts[t][None])
            logits.append(step_logits[0])
            values.append(value[0])
            records.append(record[0])
            memory, valid = ref.push(memory, valid, record[0], starts[t])
    return torch.stack(logits), torch.stack(values), torch.stack(records), memory, valid


def fixed_inputs(S: int, starts_at: list[list[int]], seed: int) -> tuple[Tensor, Tensor]:
    """Observations ``[S, E, 2]`` in the T-Maze's range and episode starts ``[S, E]`` at ``starts_at[env]``."""
    obs = torch.rand(S, len(starts_at), 2, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    starts = torch.zeros(S, len(starts_at), dtype=torch.bool)
    for env, times in enumerate(starts_at):
        starts[times, env] = True
    return obs, starts


def test_rollout_steps_give_library_logits_and_values(ref: ModuleType, args: Any) -> None:
    policy = make_library(ref, args).policy
    agent = reference_agent(ref, args, policy.state_dict())
    S, E = 14, 3
    obs, starts = fixed_inputs(S, [[0, 3, 9], [0, 5, 6], [0, 11]], seed=0)
    state, logits, values = policy.initial_state(E), [], []
    with torch.no_grad():
        for t in range(S):
            step = policy(obs[t], state, starts[t])
            logits.append(step.distribution.distribution.logits)  # normalised: log π
            values.append(step.values.flatten())
            state = step.state
    M, L, D = args.memory_length, args.n_layers, args.d_model
    ref_logits, ref_values, _, memory, valid = replay(ref, agent, obs, starts, torch.zeros(E, M, L, D),
                                                      torch.zeros(E, M, dtype=torch.bool))
    torch.testing.assert_close(ref_logits.log_softmax(-1), torch.stack(logits), atol=ATOL, rtol=0)
    torch.testing.assert_close(ref_values, torch.stack(values), atol=ATOL, rtol=0)
    torch.testing.assert_close(memory, state.pi.memory, atol=ATOL, rtol=0)  # the windows left behind
    assert torch.equal(valid, state.pi.valid)


def test_segments_give_library_logits_and_values(ref: ModuleType, args: Any) -> None:
    policy = make_library(ref, args).policy
    agent = reference_agent(ref, args, policy.state_dict())
    T, N, M, L, D = 10, 3, args.memory_length, args.n_layers, args.d_model
    obs, starts = fixed_inputs(T, [[6], [0, 5], []], seed=1)  # memory visible to the first queries of 0 and 2
    generator = torch.Generator().manual_seed(2)
    memory = torch.randn(N, M, L, D, generator=generator)
    valid = torch.tensor([[True] * M, [False] * M, [False, False, True, True]])
    actions = torch.randint(0, 4, (T * N,), generator=generator)
    values, distribution, _ = policy.evaluate_segments(obs.reshape(T * N, 2), actions,
                                                       PolicyState(Window(memory, valid)), starts)
    ref_logits, ref_values, _ = agent(obs, memory, valid, starts)
    torch.testing.assert_close(ref_logits.log_softmax(-1), distribution.distribution.logits.view(T, N, 4),
                               atol=ATOL, rtol=0)
    torch.testing.assert_close(ref_values, values.view(T, N), atol=ATOL, rtol=0)


class Snapshots(BaseCallback):
    """At the end of every rollout: the weights that collected it and the buffer's contents; then the
    weights are perturbed, so that the update scores the rollout with a policy other than the one that
    collected it (ratios away from 1, some clipped, a policy far from uniform), as a later minibatch does."""

    def __init__(self) -> None:
        super().__init__()
        self.generator = torch.Generator().manual_seed(0)
        self.taken: list[tuple[dict[str, Tensor], dict[str, Tensor], dict[str, Tensor]]] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buffer, policy = self.model.rollout_buffer, self.model.policy
        fields = ("observations", "actions", "episode_starts", "values", "log_probs", "advantages", "returns")
        rollout_weights = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        with torch.no_grad():
            for parameter in policy.parameters():
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=self.generator))
        self.taken.append((rollout_weights, {name: torch.as_tensor(np.array(getattr(buffer, name))) for name in fields},
                           {k: v.detach().clone() for k, v in policy.state_dict().items()}))


def test_ppo_loss_matches_library_update(ref: ModuleType, args: Any) -> None:
    model = make_library(ref, args)
    snapshots = Snapshots()
    model.learn(2 * args.n_steps * args.n_envs, callback=snapshots)  # two rollouts, an update after each
    library_logs = dict(model.logger.name_to_value)  # the second update's: one minibatch, before its step
    E, M, L, D = args.n_envs, args.memory_length, args.n_layers, args.d_model
    memory, valid = torch.zeros(E, M, L, D), torch.zeros(E, M, dtype=torch.bool)
    for weights, buffer, _ in snapshots.taken:  # replay both rollouts, carrying the window from one to the next
        agent = reference_agent(ref, args, weights)
        starts, actions = buffer["episode_starts"].bool(), buffer["actions"].long().squeeze(-1)
        carried = (memory, valid)
        logits, values, records, memory, valid = replay(ref, agent, buffer["observations"], starts, *carried)
        log_probs = logits.log_softmax(-1).gather(-1, actions[..., None]).squeeze(-1)
        torch.testing.assert_close(log_probs, buffer["log_probs"], atol=ATOL, rtol=0)
        torch.testing.assert_close(values, buffer["values"], atol=ATOL, rtol=0)
    assert starts[torch.arange(args.n_steps) % args.segment_length != 0].any(), "episode starts inside segments"
    rollout = ref.Rollout(buffer["observations"], actions, buffer["log_probs"], buffer["values"], starts, records,
                          *carried, advantages=buffer["advantages"], returns=buffer["returns"])
    assert rollout.valid.any(), "the second rollout starts with memory from the first"
    T = args.segment_length
    env = torch.arange(E).repeat_interleave(args.n_steps // T)
    t0 = torch.arange(0, args.n_steps, T).repeat(E)
    stds, scale = [], 0.0
    for _, taken, _ in snapshots.taken:  # σ̄, the floor of the standardisation, as the reference tracks it
        stds.append(taken["advantages"].std(correction=0).item())
        scale = ref.sustained_scale(scale, stds, args.advantage_scale_decay)
    assert scale == pytest.approx(model.advantage_scale, rel=1e-5)
    agent = reference_agent(ref, args, snapshots.taken[-1][2])  # the weights the update started from
    loss, terms = ref.ppo_loss(agent, ref.segment_batch(rollout, env, t0, T), args, scale)
    assert library_logs["train/clip_fraction"] > 0 and library_logs["train/uniform_kl"] > 1e-2
    assert loss.item() == pytest.approx(library_logs["train/loss"], abs=ATOL)
    assert terms["policy"] == pytest.approx(library_logs["train/policy_gradient_loss"], abs=ATOL)
    assert terms["value"] == pytest.approx(library_logs["train/value_loss"], abs=ATOL)
    assert -terms["entropy"] == pytest.approx(library_logs["train/entropy_loss"], abs=ATOL)
