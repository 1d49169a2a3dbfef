"""The attention layer (policies/attention/layer.py): a position scheme and a key pattern joined, and bad names,
flat-layout names and old state-dict keys refused with what to do instead."""

from __future__ import annotations

import pytest

from policies import POSITIONS
from policies.attention.layer import make_attention

D, H, DH, M = 8, 2, 4, 5


def test_a_position_named_as_the_attention_is_refused_with_the_new_spelling():
    with pytest.raises(ValueError, match="'absolute' is a position scheme: set position='absolute'"):
        make_attention("absolute", D, H, DH, max_distance=M)
    attn = make_attention("full", D, H, DH, max_distance=M, position="absolute",
                          position_options={"encoding": "learned"})
    assert (attn.pattern.name, attn.position.name) == ("full", "absolute")
    assert type(attn.position.encoding).__name__ == "LearnedPositionalEncoding"


def test_the_pattern_chooses_the_position_when_none_is_named():
    assert make_attention("local", D, H, DH, max_distance=M).position.name == "relative"
    assert make_attention("strided", D, H, DH, max_distance=M).position.name == "none"
    assert make_attention("strided", D, H, DH, max_distance=M, position="alibi").position.name == "alibi"


def test_flat_layout_keys_are_refused():
    """``attn.u`` (one class per attention) is not moved onto ``attn.position.u``: loading it fails."""
    attn = make_attention("knn", D, H, DH, max_distance=M)
    flat = {key.replace("position.", "").replace("pattern.", ""): value for key, value in attn.state_dict().items()}
    with pytest.raises(RuntimeError, match="Unexpected key"):
        attn.load_state_dict(flat)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown position 'sinusoid'; valid positions: " + ", ".join(POSITIONS)):
        make_attention("full", D, H, DH, max_distance=M, position="sinusoid")
    with pytest.raises(ValueError, match="unknown option\\(s\\) 'scale' for position 'alibi'; valid options: none"):
        make_attention("full", D, H, DH, max_distance=M, position="alibi", position_options={"scale": 2})
