"""The memory contract for every registered position scheme × every registered key pattern or memory kind
(``policies.POSITIONS`` × ``policies.ATTENTIONS``, read from the registries): step equals sequence, split
equals whole, episode isolation, env isolation, caches follow updates, memory used. A pair that cannot
combine is refused at construction, naming both and why (docs/design.md, "The memory contract")."""

from __future__ import annotations

from itertools import product

import pytest
import torch

from policies import ATTENTIONS, POSITIONS, make_backbone
from policies.window import strip_cache

INPUT_DIM, T, ENVS = 3, 7, 2
SIZES = {"d_model": 8, "n_heads": 2, "n_layers": 1, "memory_length": 4}


def build(position: str, attention: str) -> torch.nn.Module:
    """A one-layer float64 GTrXL with the pair, its weights from seed 0."""
    torch.manual_seed(0)
    return make_backbone("gtrxl", INPUT_DIM, **SIZES, attention=attention, position=position).double()


def refusal(position: str, attention: str) -> str | None:
    """The message that refuses the pair, or ``None`` when it builds."""
    try:
        build(position, attention)
    except ValueError as error:
        return str(error)
    return None


PAIRS = list(product(POSITIONS, ATTENTIONS))
ACCEPTED = [pair for pair in PAIRS if refusal(*pair) is None]
REFUSED = [pair for pair in PAIRS if pair not in ACCEPTED]


def inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A segment ``[T, 2, input]`` and its episode starts: env 0 from the start, env 1 restarting at step 4."""
    generator = torch.Generator().manual_seed(seed)
    starts = torch.zeros(T, ENVS, dtype=torch.bool)
    starts[0] = True
    starts[4, 1] = True
    return torch.randn(T, ENVS, INPUT_DIM, generator=generator, dtype=torch.float64), starts


def sequence(backbone: torch.nn.Module, x: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return backbone.forward_sequence(x, backbone.initial_state(x.shape[1]), starts)[0]


def steps(backbone: torch.nn.Module, x: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    state, outputs = backbone.initial_state(x.shape[1]), []
    with torch.no_grad():
        for x_t, start in zip(x, starts, strict=True):
            y, state = backbone.step(x_t, state, start)
            outputs.append(y)
    return torch.stack(outputs)


def test_the_registries_meet_in_pairs_that_mostly_combine():
    assert len(ACCEPTED) + len(REFUSED) == len(POSITIONS) * len(ATTENTIONS)
    assert len(ACCEPTED) > len(REFUSED)


@pytest.mark.parametrize("position,attention", REFUSED)
def test_a_refused_pair_names_both_and_why(position, attention):
    message = refusal(position, attention)
    assert f"attention {attention!r} cannot combine with position {position!r}: " in message
    assert len(message.split(": ", 1)[1]) > 20  # a reason follows


@pytest.mark.parametrize("position,attention", ACCEPTED)
def test_step_equals_sequence(position, attention):
    backbone = build(position, attention)
    x, starts = inputs()
    torch.testing.assert_close(steps(backbone, x, starts), sequence(backbone, x, starts), atol=1e-10, rtol=0)


@pytest.mark.parametrize("position,attention", ACCEPTED)
def test_split_equals_whole(position, attention):
    backbone = build(position, attention)
    x, starts = inputs()
    with torch.no_grad():
        whole = sequence(backbone, x, starts)
        first, state, _ = backbone.forward_sequence(x[:3], backbone.initial_state(ENVS), starts[:3])
        second, _, _ = backbone.forward_sequence(x[3:], state, starts[3:])
    torch.testing.assert_close(torch.cat([first, second]), whole, atol=1e-10, rtol=0)


@pytest.mark.parametrize("position,attention", ACCEPTED)
def test_episode_and_env_isolation(position, attention):
    """Moving env 1's steps before its episode start leaves its new episode's outputs as they were, and moving
    all of env 1's steps leaves env 0's: each env sees its own running episode only."""
    backbone = build(position, attention)
    x, starts = inputs()
    base = sequence(backbone, x, starts)
    before_start = x.clone()
    before_start[:4, 1] += 5.0  # env 1's first episode
    torch.testing.assert_close(sequence(backbone, before_start, starts)[4:, 1], base[4:, 1], atol=1e-10, rtol=0)
    other_env = x.clone()
    other_env[:, 1] += 5.0
    torch.testing.assert_close(sequence(backbone, other_env, starts)[:, 0], base[:, 0], atol=1e-10, rtol=0)


@pytest.mark.parametrize("position,attention", ACCEPTED)
def test_caches_follow_updates(position, attention):
    """A step after an in-place update of every parameter and ``invalidate_caches`` equals the step from a state
    without caches."""
    backbone = build(position, attention)
    x, starts = inputs()
    state = backbone.initial_state(ENVS)
    with torch.no_grad():
        for x_t, start in zip(x[:4], starts[:4], strict=True):
            _, state = backbone.step(x_t, state, start)
        for parameter in backbone.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
        backbone.invalidate_caches()
        cached, _ = backbone.step(x[4], state, starts[4])
        rebuilt, _ = backbone.step(x[4], strip_cache(state), starts[4])
    torch.testing.assert_close(cached, rebuilt, atol=1e-10, rtol=0)


@pytest.mark.parametrize("position,attention", ACCEPTED)
def test_memory_used(position, attention):
    """Moving env 0's first step changes a later output of its episode: the memory is read."""
    backbone = build(position, attention)
    x, starts = inputs()
    moved = x.clone()
    moved[0, 0] += 3.0
    changed = (sequence(backbone, moved, starts)[1:, 0] - sequence(backbone, x, starts)[1:, 0]).abs().amax()
    assert changed > 1e-6
