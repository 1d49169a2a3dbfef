"""The memory contract and its invariants step equals sequence and episode isolation (docs/design.md) for every
backbone of the registry, and for GTrXL with every registered attention (the cases come from the registries, not
from a list); every position × attention pair is in ``tests/test_position_pattern_contract.py``."""

from __future__ import annotations

import pytest
import torch

from policies import ATTENTIONS, BACKBONES, make_backbone
from policies.attention.layer import sinusoid_table
from policies.positions.encodings import ABSOLUTE_ENCODINGS
from policies.window import (
    KeyValueCache,
    SharedWindows,
    Window,
    gather_windows,
    shared_windows,
    strip_cache,
    window_history,
)
from tests.conftest import GATED, TRANSFORMERS, small_options

INPUT_DIM = 5
MEMORY = 4
OPTIONS = {name: small_options(name, d_model=16, n_heads=2, memory_length=MEMORY, hidden_size=12, n_layers=2, k=3)
           for name in BACKBONES}
DEFAULT_ATTENTION = BACKBONES["gtrxl"].options()["attention"]
CASES = {name: (name, OPTIONS[name]) for name in BACKBONES} | {
    f"gtrxl-{attention}": ("gtrxl", {**OPTIONS["gtrxl"], "attention": attention})
    for attention in ATTENTIONS if attention != DEFAULT_ATTENTION} | {
    "gtrxl-knn-top1": ("gtrxl", {**OPTIONS["gtrxl"], "attention": "knn", "attention_options": {"top_k": 1}}),
    "gtrxl-linformer-rank2": ("gtrxl", {**OPTIONS["gtrxl"], "attention": "linformer",
                                        "attention_options": {"rank": 2}}),
    "gtrxl-absolute-learned": ("gtrxl", {**OPTIONS["gtrxl"], "position": "absolute",
                                         "position_options": {"encoding": "learned"}}),
    "gtrxl-episode-time": ("gtrxl", {**OPTIONS["gtrxl"], "episode_time": "learned", "max_episode_time": 12}),
    "gtrxl-fixed": ("gtrxl", {**OPTIONS["gtrxl"], "attention": "fixed", "attention_options": {"block_length": 3}}),
    "gtrxl-image-local": ("gtrxl", {**OPTIONS["gtrxl"], "attention": "image-local",
                                    "attention_options": {"query_length": 7, "memory_extent": 2}}),
    "gtrxl-image-local-2d": ("gtrxl", {**OPTIONS["gtrxl"], "attention": "image-local",
                                       "attention_options": {"width": 4, "memory_rows": 1}}),
    "gtrxl-blockwise": ("gtrxl", {**OPTIONS["gtrxl"], "attention": "blockwise",
                                  "attention_options": {"block_length": 2, "shifts": [0, 2]}}),
    "gtrxl-bigbird": ("gtrxl", {**OPTIONS["gtrxl"], "attention": "bigbird", "attention_options": {"block_length": 3}}),
    "gtrxl-compressive-conv": ("gtrxl", {**OPTIONS["gtrxl"], "attention": "compressive",
                                         "attention_options": {"compression": "conv", "compression_rate": 2}}),
    "linear-favor": ("linear", {**OPTIONS["linear"], "feature_map": "favor", "n_features": 12}),
    "gtrxl-ff-chunks": ("gtrxl", {**OPTIONS["gtrxl"], "ff_chunks": 3}),
    "trxl-rev-reformer": ("trxl-rev", {**OPTIONS["trxl-rev"], "attention": "lsh", "ff_chunks": 3})}
"""test case → (backbone, options): every backbone, then GTrXL with each other attention, kNN
retrieval that keeps one of the older keys (with the default ``top_k`` it keeps all of a window of 4),
Linformer with two projected slots (its default rank, 5, starts as the identity over the 5 distances),
absolute positions from a learned table, GTrXL with a learned encoding of episode time (12 times,
the later ones clamped), the fixed pattern with blocks of 3 (so the key M steps before the last query
of the window test is a summary cell and visible), the Image Transformer's 1D local attention with query blocks
of 7 (the window test's last query, at time 6, ends the first one), its 2D local attention 4 steps wide (each
step's causal neighbourhood 3 columns wide and one row up, whose top-left key the window of 4 cuts), blockwise
attention with blocks of 2 and a head two blocks back (empty for the first 4 steps of an episode), BigBird with
blocks of 3 (the window test's last query, at time 6, is in block 2, whose two random blocks are then all the
earlier ones: the key M steps back is visible whatever the draws), compressive memory with a learned convolution
over blocks of two, the linear backbone with Performer features, GTrXL with a chunked feed-forward, and the
reversible backbone with the Reformer's other two parts (LSH attention, chunked feed-forward)"""
ATTENDING = [case for case, (name, _) in CASES.items() if name in TRANSFORMERS]


def build(case: str, dtype: torch.dtype = torch.float32, **extra: object) -> torch.nn.Module:
    torch.manual_seed(0)
    name, options = CASES[case]
    return make_backbone(name, INPUT_DIM, **{**options, **extra}).to(dtype)


def starts_pattern(T: int, B: int) -> torch.Tensor:
    """Episode starts at t=0 for all, then mid-sequence and mid-batch (env-specific)."""
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[0] = True
    starts[6, 1] = True
    starts[9, 0] = True
    starts[9, 2] = True
    starts[10, 2] = True  # a one-step episode
    return starts


def run_steps(backbone, x, state, starts):
    outputs = []
    with torch.no_grad():
        for t in range(x.shape[0]):
            y, state = backbone.step(x[t], state, starts[t])
            outputs.append(y)
    return torch.stack(outputs), state


def random_state(backbone, B: int, dtype=torch.float32, partial: bool = False) -> Window:
    """A state as left by earlier steps: random records, every slot valid; with ``partial``, env b's
    episode began only ``M - b`` steps ago, so its oldest ``b`` slots hold another episode's records."""
    state = backbone.initial_state(B)
    # |N(0, 1)| records: positive, so that a linear attention's carry (sums of positive features) is a valid one
    M = state.valid.shape[1]
    older = torch.arange(B).view(-1, 1) if partial else torch.zeros(B, 1, dtype=torch.long)
    return state._replace(memory=torch.randn_like(state.memory).abs(), valid=torch.arange(M).view(1, -1) >= older,
                          clock=None if state.clock is None else torch.arange(B) + M + 1)  # episodes under way


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_step_equals_sequence(name, dtype, atol):
    """Step equals sequence: stepping equals the whole sequence (T > M, starts mid-sequence and mid-batch),
    and equals the sequence cut into two segments with the state carried between them."""
    backbone = build(name, dtype)
    T, B = 3 * MEMORY + 2, 3
    x = torch.randn(T, B, INPUT_DIM, dtype=dtype)
    starts = starts_pattern(T, B)
    starts[0, 0] = False  # env 0 continues the episode of the random state
    starts[0, 1] = False  # env 1 continues an episode that began M - 1 steps before the segment
    state0 = random_state(backbone, B, dtype, partial=True)
    y_step, state_step = run_steps(backbone, x, state0, starts)
    with torch.no_grad():
        y_seq, state_seq, _ = backbone.forward_sequence(x, state0, starts)
        y_a, state_a, _ = backbone.forward_sequence(x[:5], state0, starts[:5])
        y_b, state_b, _ = backbone.forward_sequence(x[5:], state_a, starts[5:])
    assert y_step.dtype == dtype and y_seq.shape == (T, B, backbone.output_dim)
    torch.testing.assert_close(y_step, y_seq, atol=atol, rtol=0)
    torch.testing.assert_close(torch.cat([y_a, y_b]), y_seq, atol=atol, rtol=0)
    for key in ("memory", "valid"):
        torch.testing.assert_close(getattr(state_step, key), getattr(state_seq, key), atol=atol, rtol=0)
        torch.testing.assert_close(getattr(state_b, key), getattr(state_seq, key), atol=atol, rtol=0)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("mode", ["step", "sequence"])
def test_episode_isolation(name, mode):
    """Episode isolation: after env 0's episode starts at t=6, neither what env 0 saw before (inputs or
    the state it carried in) nor anything the other envs see changes env 0's outputs."""
    backbone = build(name)
    T, B, start = 3 * MEMORY + 2, 3, 6
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[start, 0] = True
    starts[4, 1] = True
    x = torch.randn(T, B, INPUT_DIM)
    state = random_state(backbone, B)
    x_other, state_other = x.clone(), state._replace(memory=torch.randn_like(state.memory) * 3)
    x_other[:start, 0] = torch.randn(start, INPUT_DIM) * 3
    x_other[:, 1:] = torch.randn(T, B - 1, INPUT_DIM) * 3

    def outputs(inputs, state0):
        if mode == "step":
            return run_steps(backbone, inputs, state0, starts)[0]
        with torch.no_grad():
            return backbone.forward_sequence(inputs, state0, starts)[0]

    y, y_other = outputs(x, state), outputs(x_other, state_other)
    torch.testing.assert_close(y[start:, 0], y_other[start:, 0], atol=1e-5, rtol=0)
    if name != "mlp":  # the perturbation itself is visible to every memory before the start
        assert not torch.allclose(y[:start, 0], y_other[:start, 0], atol=1e-3)


@pytest.mark.parametrize("name", ATTENDING)
def test_window_is_exactly_memory_length(name):
    """An input exactly M steps back still changes a 1-layer transformer's output; one M+1 back does not
    (M is the attention's reach: the memory length, or a local attention's window)."""
    extra = {"max_steps": 1} if name == "ut-act" else {"n_layers": 1}
    backbone = build(name, **extra)
    reach = backbone.memory_blocks[0].attn.reach
    T, B = MEMORY + 3, 1
    x = torch.randn(T, B, INPUT_DIM)
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[0] = True
    state = backbone.initial_state(B)
    last = T - 1

    def final_output(inputs):
        with torch.no_grad():
            return backbone.forward_sequence(inputs, state, starts)[0][last]

    base = final_output(x)
    for back, changes in ((reach, True), (reach + 1, False)):
        # a few random directions: an attention with ReLU weights (distance-aware) may give one key
        # exactly zero weight for one perturbation, but not for all
        moved = []
        for _ in range(4):
            perturbed = x.clone()
            perturbed[last - back] += 5.0 * torch.randn(B, INPUT_DIM)
            y = final_output(perturbed)
            moved.append(not torch.allclose(y, base, atol=1e-4))
            y_step = run_steps(backbone, perturbed, state, starts)[0][last]
            torch.testing.assert_close(y_step, y, atol=1e-5, rtol=0)
        assert any(moved) == changes, f"{back} steps back"


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_reach_every_parameter(name):
    backbone = build(name, **({"step_encoding": "learned"} if name == "ut-act" else {}))
    T, B = 3 * MEMORY + 2, 3
    x = torch.randn(T, B, INPUT_DIM)
    y, state, aux = backbone.forward_sequence(x, random_state(backbone, B), starts_pattern(T, B))
    loss = y.square().mean() + sum(value.mean() for value in aux.values())
    loss.backward()
    missing = [n for n, p in backbone.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, f"no gradient for {missing}"
    assert not any(t.requires_grad for t in state.as_dict().values()), "memory must be kept without gradient"


@pytest.mark.parametrize("name", GATED)
@pytest.mark.parametrize("gate", ["input", "output", "highway", "sigmoid-tanh", "gru"])
def test_every_gate_reaches_its_bias(name, gate):
    backbone = build(name, gate=gate)
    x = torch.randn(6, 2, INPUT_DIM)
    y, _, _ = backbone.forward_sequence(x, backbone.initial_state(2), torch.zeros(6, 2, dtype=torch.bool))
    y.square().mean().backward()
    biases = [p for n, p in backbone.named_parameters() if n.endswith("gate.bias")]
    assert biases and all(p.grad is not None and p.grad.abs().sum() > 0 for p in biases)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("T", [1, 4])
def test_shared_records_equal_per_window_computation(name, T):
    """Windows handed as distinct records plus slots (each record projected once) give the same outputs
    and gradients as the same windows materialised per sample, for T = 1 and T > 1 (mutation caught:
    gathering keys with the slots of another window)."""
    backbone = build(name)
    E, S, M = 3, 10, backbone.memory_length
    torch.manual_seed(1)
    history = window_history(torch.randn(E, M, *backbone.record_shape), torch.rand(E, M) > 0.3,
                             torch.randn(E, S, *backbone.record_shape), torch.rand(E, S) < 0.2)
    env = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1]).repeat(3)  # overlapping windows, each three times
    t0 = torch.tensor([2, 0, 5, 1, 4, 3, 3, 4]).repeat(3)
    shared = shared_windows(history, env, t0, M)
    if getattr(backbone, "shares_records", False):
        assert isinstance(shared, SharedWindows) and shared.records.shape[0] < env.numel() * M, \
            "overlapping windows share records"
    memory, valid = gather_windows(history, env, t0, M)
    x = torch.randn(T, env.numel(), INPUT_DIM)
    starts = torch.rand(T, env.numel()) < 0.3

    def outputs_and_grads(state, update_path=False):
        backbone.zero_grad()
        segment_state = backbone.segment_state(state)
        if update_path:  # what the learners' update calls: no state after the segment
            y, _, _ = backbone.forward_sequence(x, segment_state, starts, final_state=False)
        else:
            y, _, _ = backbone.forward_sequence(x, segment_state, starts)
        y.square().sum().backward()
        return y, [p.grad.clone() for p in backbone.parameters() if p.grad is not None]

    windows = Window(memory, valid)
    if backbone.initial_state(1).clock is not None:  # episode-time encodings read the clock entering each window
        clock = torch.randint(0, 50, (env.numel(),))
        windows, shared = windows._replace(clock=clock), shared._replace(clock=clock)
    y_windows, grads_windows = outputs_and_grads(windows)
    for update_path in (False, True):
        y_shared, grads_shared = outputs_and_grads(shared, update_path)
        torch.testing.assert_close(y_shared, y_windows, atol=1e-5, rtol=0)
        for a, b in zip(grads_shared, grads_windows, strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ATTENDING)
def test_step_caches_follow_parameter_updates(name):
    """Rollout caches (keys/values, projected distances) are rebuilt after an optimizer step and
    ``invalidate_caches``, as the learner calls it."""
    backbone = build(name)
    B, T = 2, MEMORY + 3
    x = torch.randn(2 * T, B, INPUT_DIM)
    starts = torch.zeros(2 * T, B, dtype=torch.bool)
    starts[0] = True
    _, state = run_steps(backbone, x[:T], backbone.initial_state(B), starts[:T])
    optimizer = torch.optim.Adam(backbone.parameters(), lr=0.05)
    y, _, _ = backbone.forward_sequence(x[:T], backbone.initial_state(B), starts[:T])
    y.square().mean().backward()
    optimizer.step()
    backbone.invalidate_caches()
    y_step, _ = run_steps(backbone, x[T:], state, starts[T:])
    with torch.no_grad():
        y_seq, _, _ = backbone.forward_sequence(x[T:], strip_cache(state), starts[T:])
    torch.testing.assert_close(y_step, y_seq, atol=1e-5, rtol=0)


def cached_rollout(backbone):
    """Step a few envs so the state holds rollout caches; returns a check that the next step from that
    state equals ``forward_sequence`` from it without caches (run after changing the parameters)."""
    B, T = 2, MEMORY + 2
    x = torch.randn(T + 1, B, INPUT_DIM)
    starts = torch.zeros(T + 1, B, dtype=torch.bool)
    starts[0] = True
    _, state = run_steps(backbone, x[:T], backbone.initial_state(B), starts[:T])

    def next_step_agrees(message: str) -> None:
        with torch.no_grad():
            y_step, _ = backbone.step(x[T], state, starts[T])
            y_seq, _, _ = backbone.forward_sequence(x[T:], strip_cache(state), starts[T:])
        torch.testing.assert_close(y_step, y_seq[0], atol=1e-5, rtol=0, msg=message)

    return next_step_agrees


@pytest.mark.parametrize("name", ATTENDING)
def test_step_caches_follow_every_block_parameter(name):
    """After any single parameter of a memory block changes in place, ``invalidate_caches`` makes the next step
    equal the sequence: nothing a step caches escapes invalidation (W_kR, u, v, the norms)."""
    backbone = build(name)
    next_step_agrees = cached_rollout(backbone)
    blocks = {id(block): block for block in backbone.memory_blocks}.values()
    for n, parameter in enumerate(p for block in blocks for p in block.parameters()):
        with torch.no_grad():
            parameter.add_(0.5 * torch.randn_like(parameter))
        backbone.invalidate_caches()
        next_step_agrees(f"stale cache after parameter {n}")


@pytest.mark.parametrize("name", ATTENDING)
def test_step_caches_follow_parameters_assigned_by_load_state_dict(name):
    """``load_state_dict`` (here with ``assign=True``) invalidates the caches itself."""
    backbone = build(name)
    next_step_agrees = cached_rollout(backbone)
    other = {k: v + 0.3 * torch.randn_like(v) if v.is_floating_point() else v
             for k, v in backbone.state_dict().items()}
    backbone.load_state_dict(other, assign=True)
    next_step_agrees("stale cache after load_state_dict(assign=True)")


def test_casting_the_backbone_makes_its_caches_stale():
    """After ``.double()`` the step rebuilds its key/value caches (mutation caught: caches of the float32 parameters
    read as they were)."""
    backbone = build("gtrxl")
    x = torch.randn(MEMORY + 2, 2, INPUT_DIM)
    starts = torch.zeros(MEMORY + 2, 2, dtype=torch.bool)
    starts[0] = True
    _, state = run_steps(backbone, x[:-1], backbone.initial_state(2), starts[:-1])
    with torch.no_grad():
        backbone.double()
        state = state._replace(memory=state.memory.double(), cache=KeyValueCache(
            *(tuple(t.double() for t in part) for part in state.cache[:2]), state.cache.generation))
        cached, _ = backbone.step(x[-1].double(), state, starts[-1])
        rebuilt, _ = backbone.step(x[-1].double(), strip_cache(state), starts[-1])
    torch.testing.assert_close(cached, rebuilt, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ATTENDING)
def test_a_state_another_backbone_stepped_is_read_with_its_own_keys_and_values(name):
    """Two backbones of one shape and different parameters: a state the first filled with key/value caches, given
    to the second, is read through the second's own keys and values (mutation caught: generations counted from 0
    in every backbone, so the second read the first one's caches)."""
    first = build(name)
    torch.manual_seed(1)
    second = make_backbone(CASES[name][0], INPUT_DIM, **CASES[name][1])
    B, T = 2, MEMORY + 2
    x = torch.randn(T + 1, B, INPUT_DIM)
    starts = torch.zeros(T + 1, B, dtype=torch.bool)
    starts[0] = True
    _, state = run_steps(first, x[:T], first.initial_state(B), starts[:T])
    with torch.no_grad():
        cached, _ = second.step(x[T], state, starts[T])
        own, _ = second.step(x[T], strip_cache(state), starts[T])
    torch.testing.assert_close(cached, own, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", ATTENDING)
def test_a_cache_that_does_not_fit_the_window_is_rebuilt(name):
    """A state whose cached keys and values are not the window's (other slots, heads or width, another dtype, a
    depth missing) is stepped as if it had no cache (mutation caught: the generation alone was trusted, and the
    attention raised torch's size error)."""
    backbone = build(name)
    B, T = 2, MEMORY + 2
    x = torch.randn(T + 1, B, INPUT_DIM)
    starts = torch.zeros(T + 1, B, dtype=torch.bool)
    starts[0] = True
    _, state = run_steps(backbone, x[:T], backbone.initial_state(B), starts[:T])
    keys, values, generation = state.cache
    broken = {"fewer slots": (tuple(k[:, :, 1:] for k in keys), values),
              "wider heads": (tuple(torch.cat([k, k], dim=-1) for k in keys), values),
              "float64": (tuple(k.double() for k in keys), values),
              "a depth missing": (keys[:-1], values[:-1])}
    with torch.no_grad():
        rebuilt, _ = backbone.step(x[T], strip_cache(state), starts[T])
        for case, (k, v) in broken.items():
            y, _ = backbone.step(x[T], state._replace(cache=KeyValueCache(k, v, generation)), starts[T])
            torch.testing.assert_close(y, rebuilt, atol=1e-6, rtol=0, msg=case)


@pytest.mark.parametrize("name", list(BACKBONES))
def test_initial_state_names_an_n_envs_that_is_no_count(name):
    backbone = build(name)
    for n_envs in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match=rf"^n_envs={n_envs!r}: expected an integer >= 0$"):
            backbone.initial_state(n_envs)
    assert len(backbone.initial_state(0).valid) == 0


@pytest.mark.parametrize("name", list(BACKBONES))
def test_state_is_env_major_and_indexable(name):
    """A learner can slice and concatenate states per env without knowing the backbone."""
    backbone = build(name)
    B = 4
    x = torch.randn(12, B, INPUT_DIM)
    starts = starts_pattern(12, B)
    _, state = run_steps(backbone, x, backbone.initial_state(B), starts)
    assert all(t.shape[0] == B for t in state.as_dict().values())
    halves = [state.rows(torch.arange(i, i + 2)) for i in (0, 2)]
    fields = zip(*map(strip_cache, halves), strict=True)
    joined = Window(*(None if parts[0] is None else torch.cat(parts) for parts in fields))
    x_next = torch.randn(B, INPUT_DIM)
    no_start = torch.zeros(B, dtype=torch.bool)
    with torch.no_grad():
        y_joined, _ = backbone.step(x_next, joined, no_start)
        y_parts = torch.cat([backbone.step(x_next[i:i + 2], half, no_start[:2])[0]
                             for i, half in zip((0, 2), halves, strict=True)])
        y_full, _ = backbone.step(x_next, state, no_start)
    torch.testing.assert_close(y_joined, y_full)
    torch.testing.assert_close(y_parts, y_full, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", list(BACKBONES))
def test_state_follows_module_dtype_and_device(name):
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        backbone = build(name, torch.float64).to(device)
        state = backbone.initial_state(3)
        assert state.memory.dtype == torch.float64 and state.memory.device.type == device
        y, state = backbone.step(torch.randn(3, INPUT_DIM, dtype=torch.float64, device=device), state,
                                 torch.ones(3, dtype=torch.bool, device=device))
        assert y.dtype == torch.float64 and y.device.type == device
        assert all(t.device.type == device for t in state.as_dict().values())


@pytest.mark.parametrize("step_encoding", list(ABSOLUTE_ENCODINGS))
def test_ut_adds_the_step_encoding_of_each_ponder_step(step_encoding):
    """With halting probabilities ≈ 0 the state does not move before the last ponder step, so the
    inputs recorded for ponder steps n and 0 differ exactly by P_n − P_0 (the sinusoids from their
    formula, the trained encodings from their module)."""
    backbone = build("ut-act", max_steps=3, step_encoding=step_encoding)
    with torch.no_grad():
        backbone.act.halting.weight.zero_()
        backbone.act.halting.bias.fill_(-40.0)
        _, state = backbone.step(torch.randn(2, INPUT_DIM), backbone.initial_state(2), torch.ones(2, dtype=torch.bool))
    records = state.memory[:, -1]  # [B, n_depth, D]
    encoding = (sinusoid_table(torch.arange(3), OPTIONS["ut-act"]["d_model"]) if step_encoding == "sinusoidal"
                else backbone.step_encoding(torch.arange(3)).detach())
    torch.testing.assert_close(records - records[:, :1], (encoding - encoding[:1]).expand(2, -1, -1))


def test_unknown_backbone_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown backbone 'gtrx'.*gtrxl.*lstm"):
        make_backbone("gtrx", 4)


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"'memory_len'.*valid options: .*memory_length"):
        make_backbone("gtrxl", 4, memory_len=8)
    with pytest.raises(ValueError, match=r"'gate'.*trxl-i"):
        make_backbone("trxl-i", 4, gate="gru")
    with pytest.raises(ValueError, match=r"gate='lstm': expected one of residual, input"):
        make_backbone("gtrxl", 4, gate="lstm")


@pytest.mark.parametrize("name", list(BACKBONES))
def test_step_and_forward_sequence_name_inputs_they_cannot_take(name):
    """Used directly, every backbone names a wrong input in a `ValueError` before any arithmetic (mutation caught:
    a backbone whose entry point skips the shared check, which raised torch's own error or ran on an empty
    segment)."""
    torch.manual_seed(0)
    backbone = make_backbone(name, INPUT_DIM, **OPTIONS[name])
    state = backbone.initial_state(3)
    x, starts = torch.zeros(3, INPUT_DIM), torch.zeros(3, dtype=torch.bool)
    for args, message in [
        ((torch.zeros(3, INPUT_DIM + 1), state, starts), r"^x has width 6 \(shape \(3, 6\)\); this backbone takes "
                                                        r"inputs of width 5$"),
        ((x.long(), state, starts), r"^x is a torch.int64 tensor of shape \(3, 5\); expected a float tensor \[B, D\]"),
        ((x.numpy(), state, starts), r"^x is ndarray; expected a float tensor"),
        ((x[None], state, starts), r"^x is a torch.float32 tensor of shape \(1, 3, 5\); expected a float tensor \[B"),
        ((x, state, starts.numpy()), r"^episode starts are of type ndarray; expected a tensor of one flag"),
        ((x, state, starts[:2]), r"^episode starts are of shape \(2,\); expected .*\(3,\)$"),
        ((x, None, starts), r"^state is None; expected initial_state\(n_envs\)"),
        ((x[:2], state, starts[:2]), r"^state holds the memory of 3 env\(s\), x 2"),
    ]:
        with pytest.raises(ValueError, match=message):
            backbone.step(*args)
    segment = backbone.segment_state(state)
    for args, message in [
        ((torch.zeros(0, 3, INPUT_DIM), segment, torch.zeros(0, 3, dtype=torch.bool)), r"expected a float tensor "
                                                                                        r"\[T, B, D\] .*not empty"),
        ((torch.zeros(4, 3, INPUT_DIM), segment, torch.zeros(3, 4, dtype=torch.bool)), r"^episode starts are of "
                                                                                        r"shape \(3, 4\)"),
    ]:
        with pytest.raises(ValueError, match=message):
            backbone.forward_sequence(*args)
