"""A backbone's `step` and `forward_sequence` refuse, in the shared `MemoryBackbone.check_inputs` and before any
arithmetic, inputs in another dtype than the parameters' and states that are not this backbone's (another
backbone's windows, a dict, windows of another dtype or batch), for every registered backbone."""

from __future__ import annotations

import pytest
import torch

from policies import BACKBONES, make_backbone
from policies.backbone import MemoryBackbone
from policies.window import SharedWindows, Window
from tests.conftest import small_options

INPUT_DIM = 5
N_ENVS = 3
OPTIONS = {name: small_options(name, d_model=16, n_heads=2, memory_length=4, hidden_size=12, n_layers=2, k=3)
           for name in BACKBONES}


def build(name: str) -> MemoryBackbone:
    torch.manual_seed(0)
    return make_backbone(name, INPUT_DIM, **OPTIONS[name])


@pytest.fixture(scope="module")
def states() -> dict[str, Window]:
    """The initial state of `N_ENVS` envs of every backbone."""
    return {name: build(name).initial_state(N_ENVS) for name in BACKBONES}


def step_args(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(N_ENVS, INPUT_DIM, dtype=dtype), torch.zeros(N_ENVS, dtype=torch.bool)


def segment_args(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(2, N_ENVS, INPUT_DIM, dtype=dtype), torch.zeros(2, N_ENVS, dtype=torch.bool)


@pytest.mark.parametrize("name", list(BACKBONES))
def test_inputs_in_another_dtype_than_the_parameters_are_refused(name):
    """Float64 inputs to a float32 backbone name both dtypes (mutation caught: torch's dtype error from the first
    matrix product); after `.double()` float64 is taken and float32 refused; under autocast any float is taken."""
    backbone = build(name)
    state = backbone.initial_state(N_ENVS)
    x, starts = step_args(torch.float64)
    message = r"^x is a torch.float64 tensor; this backbone's parameters are torch.float32: expected x of dtype " \
              r"torch.float32"
    with pytest.raises(ValueError, match=message):
        backbone.step(x, state, starts)
    with pytest.raises(ValueError, match=message):
        backbone.forward_sequence(*segment_args(torch.float64)[:1], backbone.segment_state(state),
                                  segment_args()[1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        backbone.check_inputs(x.bfloat16(), state, starts, 2)
    with torch.no_grad():
        backbone.double()
        y, _ = backbone.step(x, backbone.initial_state(N_ENVS), starts)
    assert y.dtype == torch.float64
    with pytest.raises(ValueError, match=r"^x is a torch.float32 tensor; .*parameters are torch.float64"):
        backbone.step(x.float(), backbone.initial_state(N_ENVS), starts)


@pytest.mark.parametrize("name", list(BACKBONES))
def test_the_dtype_check_follows_parameters_replaced_by_load_state_dict(name):
    """`load_state_dict(assign=True)` replaces the parameters: the check reads the new ones' dtype."""
    backbone = build(name)
    backbone.step(*step_args()[:1], backbone.initial_state(N_ENVS), step_args()[1])  # the place found
    backbone.load_state_dict({key: value.double() if value.is_floating_point() else value
                              for key, value in backbone.state_dict().items()}, assign=True)
    x, starts = step_args()
    with pytest.raises(ValueError, match=r"^x is a torch.float32 tensor; .*parameters are torch.float64"):
        backbone.step(x, backbone.initial_state(N_ENVS), starts)


@pytest.mark.parametrize("name", list(BACKBONES))
def test_another_backbones_state_is_refused(name, states):
    """Every other backbone's state whose windows differ in length or record shape is refused, naming its shape
    (mutation caught: layer norm's or the recurrence's own error, or a state read as if it fitted)."""
    backbone = build(name)
    own = (backbone.memory_length, *backbone.record_shape)
    x, starts = step_args()
    foreign = [state for state in states.values() if tuple(state.memory.shape[1:]) != own]
    assert foreign
    for state in foreign:
        message = (rf"^state is not this backbone's: its memory is a torch.float32 tensor of shape "
                   rf"\({', '.join(map(str, state.memory.shape))}\); {type(backbone).__name__} keeps windows of "
                   rf"{backbone.memory_length} record")
        with pytest.raises(ValueError, match=message):
            backbone.step(x, state, starts)
        with pytest.raises(ValueError, match=message):
            backbone.forward_sequence(*segment_args()[:1], state, segment_args()[1])


@pytest.mark.parametrize("name", list(BACKBONES))
def test_a_state_of_another_dtype_or_batch_is_refused(name):
    """Windows in float64 for float32 parameters, and a segment's state of another number of envs."""
    backbone = build(name)
    state = backbone.initial_state(N_ENVS)
    x, starts = step_args()
    with pytest.raises(ValueError, match=r"^state is not this backbone's: its memory is a torch.float64 tensor"):
        backbone.step(x, state._replace(memory=state.memory.double()), starts)
    with pytest.raises(ValueError, match=r"^state holds the memory of 2 env\(s\), x 3"):
        backbone.forward_sequence(*segment_args()[:1], backbone.segment_state(backbone.initial_state(2)),
                                  segment_args()[1])


@pytest.mark.parametrize("name", list(BACKBONES))
def test_a_state_of_another_type_is_refused(name):
    """A dict (the state at predict's boundary) and a plain tuple name the type expected (mutation caught:
    `AttributeError` on the dict's missing fields)."""
    backbone = build(name)
    state = backbone.initial_state(N_ENVS)
    x, starts = step_args()
    for wrong, kind in [(state._asdict(), "dict"), (state.as_dict(), "dict"), (tuple(state), "tuple")]:
        with pytest.raises(ValueError, match=rf"^state is a {kind}; expected a Window: initial_state\(n_envs\)"):
            backbone.step(x, wrong, starts)
        with pytest.raises(ValueError, match=rf"^state is a {kind}; expected a Window or SharedWindows: "):
            backbone.forward_sequence(*segment_args()[:1], wrong, segment_args()[1])


def test_shared_windows_of_this_backbone_pass_and_of_another_shape_do_not():
    """A segment's shared records are checked by their record shape and window length."""
    backbone = build("gtrxl")
    state = backbone.initial_state(N_ENVS)
    shared = SharedWindows(state.memory[0], torch.zeros(N_ENVS, state.valid.shape[1], dtype=torch.long),
                           state.valid)
    backbone.forward_sequence(*segment_args()[:1], shared, segment_args()[1])
    narrow = shared._replace(records=shared.records[..., :8])
    with pytest.raises(ValueError, match=rf"^state is not this backbone's: its memory is a torch.float32 tensor of "
                                         rf"shape \({', '.join(map(str, narrow.records.shape))}\)"):
        backbone.forward_sequence(*segment_args()[:1], narrow, segment_args()[1])
