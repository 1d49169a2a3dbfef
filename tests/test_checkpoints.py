"""A tiny MemoryPPO saved before policies/ was laid out by axis (``tests/golden/make_checkpoint.py``), its options
and parameter names converted once to today's, loads and gives the values and logits it gave then."""

from __future__ import annotations

from pathlib import Path

import torch

from agents import MemoryPPO

DATA = Path(__file__).resolve().parent / "data"


def test_a_converted_checkpoint_loads_and_acts_as_before():
    expected = torch.load(DATA / "gtrxl_ppo_saved_outputs.pt")
    policy = MemoryPPO.load(DATA / "gtrxl_ppo_saved.zip", device="cpu").policy
    state, starts = policy.initial_state(2), torch.tensor([True, True])
    values, logits = [], []
    with torch.no_grad():
        for obs in expected["observations"]:
            step = policy(obs, state, starts)
            state, starts = step.state, torch.tensor([False, False])
            values.append(step.values)
            logits.append(step.distribution.distribution.logits)
    torch.testing.assert_close(torch.stack(values), expected["values"], atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.stack(logits), expected["logits"], atol=1e-6, rtol=0)
