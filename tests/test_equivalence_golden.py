"""No behaviour change: every backbone and attention recorded by ``tests/golden/make_golden.py`` (recorded
before policies/ was laid out by axis) loads its recorded state dict into today's classes and gives the
recorded outputs, segment at once and step by step, to 1e-6 in float32 (plus 1e-6 of the value: the linear
attention's running sums reach ~10, where another CPU's kernels round the float32 sums differently: 2.9e-6 apart
on an Intel Xeon for goldens recorded on an AMD EPYC). The recorded options and state-dict keys are spelled as
today's classes name them (``gtrxl/alibi``: ``attention="full", position="alibi"``); the outputs are as recorded."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))

from make_golden import GOLDEN, build, run  # noqa: E402

RECORDED = torch.load(GOLDEN, weights_only=False)
TOLERANCE = 1e-6
RELATIVE = 1e-6


def assert_close(actual: object, expected: object, where: str) -> None:
    """Tensors (or dicts of them) equal to ``TOLERANCE`` + ``RELATIVE`` of the value; integer and bool tensors
    exactly."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), f"{where}: keys {actual} vs {expected}"
        for key in expected:
            assert_close(actual[key], expected[key], f"{where}.{key}")
        return
    assert isinstance(actual, torch.Tensor) and actual.shape == expected.shape, where
    if expected.is_floating_point():
        torch.testing.assert_close(actual, expected, atol=TOLERANCE, rtol=RELATIVE, msg=lambda m: f"{where}: {m}")
    else:
        assert torch.equal(actual, expected), where


@pytest.mark.parametrize("case", sorted(RECORDED["cases"]))
def test_recorded_weights_give_recorded_outputs(case):
    recorded = RECORDED["cases"][case]
    model = build(recorded["backbone"], recorded["options"])
    model.load_state_dict(recorded["state_dict"])
    outputs = run(model, RECORDED["inputs"])
    for part in ("start_state", "steps", "sequence", "state_after", "aux"):
        assert_close(outputs[part], recorded[part], f"{case}: {part}")


def test_every_registered_backbone_is_recorded():
    from policies import BACKBONES

    assert all(RECORDED["cases"][name]["backbone"] == name for name in BACKBONES)
