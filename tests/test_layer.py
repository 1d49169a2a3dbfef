"""The attention layer (policies/attention/layer.py): a position scheme and a key pattern joined, the flat
layout's names and state-dict keys still read, and bad names refused with the valid ones."""

from __future__ import annotations

import pytest
import torch

from policies import POSITIONS
from policies.attention.layer import make_attention

D, H, DH, M = 8, 2, 4, 5


def test_a_position_named_as_the_attention_is_the_full_window_with_that_position():
    torch.manual_seed(0)
    legacy = make_attention("absolute", D, H, DH, max_distance=M, options={"encoding": "learned"})
    assert (legacy.pattern.name, legacy.position.name) == ("full", "absolute")
    assert type(legacy.position.encoding).__name__ == "LearnedPositionalEncoding"


def test_the_pattern_chooses_the_position_when_none_is_named():
    assert make_attention("local", D, H, DH, max_distance=M).position.name == "relative"
    assert make_attention("strided", D, H, DH, max_distance=M).position.name == "none"
    assert make_attention("strided", D, H, DH, max_distance=M, position="alibi").position.name == "alibi"


def test_flat_layout_keys_move_onto_the_position_and_the_pattern():
    """``attn.r_net.weight``, ``attn.u``, ``attn.gate_logit`` (one class per attention) load into
    ``attn.position.*`` and ``attn.pattern.*`` (mutation caught: the keys left where they were)."""
    torch.manual_seed(0)
    attn = make_attention("knn", D, H, DH, max_distance=M)
    flat = {key.replace("position.", "").replace("pattern.", ""): value + 1.0
            for key, value in attn.state_dict().items()}
    assert "u" in flat and "gate_logit" in flat
    attn.load_state_dict(flat)
    torch.testing.assert_close(attn.position.u, flat["u"])
    torch.testing.assert_close(attn.pattern.gate_logit, flat["gate_logit"])


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown position 'sinusoid'; valid positions: " + ", ".join(POSITIONS)):
        make_attention("full", D, H, DH, max_distance=M, position="sinusoid")
    with pytest.raises(ValueError, match="unknown option\\(s\\) 'scale' for position 'alibi'; valid options: none"):
        make_attention("alibi", D, H, DH, max_distance=M, options={"scale": 2})
