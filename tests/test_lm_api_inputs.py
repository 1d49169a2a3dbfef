"""The language model's Python API (`policies.lm.model.MemoryLanguageModel`, docs/language-models.md) refuses a bad
argument with one `ValueError` naming the argument, its value and what is valid, before any arithmetic."""

from __future__ import annotations

import pytest
import torch

from policies.lm.model import MemoryLanguageModel

VOCAB = 16


@pytest.fixture(scope="module")
def lm() -> MemoryLanguageModel:
    torch.manual_seed(0)
    return MemoryLanguageModel(vocab_size=VOCAB, backbone="gtrxl", d_model=16, memory_length=8).eval()


@pytest.mark.parametrize(("options", "message"), [
    ({"vocab_size": -1}, r"^vocab_size=-1: expected an integer >= 1$"),
    ({"vocab_size": 0}, r"^vocab_size=0: expected an integer >= 1$"),
    ({"vocab_size": "16"}, r"^vocab_size='16': expected an integer >= 1$"),
    ({"vocab_size": 16.0}, r"^vocab_size=16.0: expected an integer >= 1$"),
    ({"vocab_size": 16, "d_embed": 0}, r"^d_embed=0: expected an integer >= 1$"),
    ({"vocab_size": 16, "future_targets": -1}, r"^future_targets=-1: expected an integer >= 0$"),
])
def test_the_constructor_names_a_bad_size(options, message):
    """Mutation caught: torch's own error from the embedding, or a model of no token that fails at its first loss."""
    with pytest.raises(ValueError, match=message):
        MemoryLanguageModel(**options, backbone="gtrxl", d_model=16, memory_length=8)


def test_loss_names_tokens_outside_the_vocabulary_or_of_no_integer_type(lm):
    """Mutation caught: the embedding's `IndexError`, or torch's dtype error for float tokens."""
    state = lm.initial_state(2)
    ids = r"expected an integer in \[0, 15\] \(a token id below vocab_size=16\)$"
    for tokens, message in [
        (torch.full((5, 2), 99), rf"^tokens=99: {ids}"),
        (torch.full((5, 2), -1), rf"^tokens=-1: {ids}"),
        (torch.tensor([[0, 1], [2, 16]]), rf"^tokens=16: {ids}"),
        (torch.zeros(5, 2), r"^tokens is a torch.float32 tensor of shape \(5, 2\); expected an integer tensor of "
                            r"token ids \[T, B\] of at least 2 step\(s\)"),
        (torch.zeros(5, 2, dtype=torch.bool), r"^tokens is a torch.bool tensor"),
        (torch.zeros(1, 2, dtype=torch.long), r"^tokens is a torch.int64 tensor of shape \(1, 2\); .*at least 2 "),
        (torch.zeros(5, 0, dtype=torch.long), r"^tokens is a torch.int64 tensor of shape \(5, 0\); .*one stream"),
        (torch.zeros(5, dtype=torch.long), r"^tokens is a torch.int64 tensor of shape \(5,\)"),
        ([[0, 1], [2, 3]], r"^tokens is list; expected an integer tensor"),
    ]:
        with pytest.raises(ValueError, match=message):
            lm.loss(tokens, state)


def test_loss_takes_any_integer_dtype_within_the_vocabulary(lm):
    """Byte tokens (`uint8`) and `int32` give the loss of the same `int64` ids; a wrong one is still refused."""
    tokens = torch.randint(VOCAB, (5, 2))
    expected, _, _ = lm.loss(tokens, lm.initial_state(2))
    for dtype in (torch.uint8, torch.int32):
        loss, _, _ = lm.loss(tokens.to(dtype), lm.initial_state(2))
        torch.testing.assert_close(loss, expected)
    with pytest.raises(ValueError, match=r"^tokens=16: "):
        lm.loss(torch.full((5, 2), VOCAB, dtype=torch.uint8), lm.initial_state(2))


def test_every_entry_point_names_a_state_that_does_not_fit_the_tokens(lm):
    """A state of 3 streams for 2, `None` or a dict (mutation caught: torch's shape error, `AttributeError`)."""
    tokens = torch.randint(VOCAB, (5, 2))
    calls = [lambda state: lm.loss(tokens, state), lambda state: lm.hidden_states(tokens, state),
             lambda state: lm(tokens, state), lambda state: lm.early_exit_loss(tokens, state, 0.5),
             lambda state: lm.generate(tokens[-1], state, n_tokens=2)]
    for call in calls:
        with pytest.raises(ValueError, match=r"^state holds the memory of 3 stream\(s\), the tokens 2; expected "
                                             r"initial_state\(2\)"):
            call(lm.initial_state(3))
        with pytest.raises(ValueError, match=r"^state=None: expected a Window, initial_state\(2\)"):
            call(None)
        with pytest.raises(ValueError, match=r"^state=a dict: expected a Window"):
            call(lm.initial_state(2).as_dict())


def test_loss_names_document_starts_or_scored_flags_of_another_shape_or_value(lm):
    tokens = torch.randint(VOCAB, (5, 2))
    with pytest.raises(ValueError, match=r"^starts is of shape \(4, 2\); expected None or a tensor of one flag per "
                                         r"token, \(5, 2\)$"):
        lm.loss(tokens, lm.initial_state(2), starts=torch.zeros(4, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^scored is a list; expected None or a tensor"):
        lm.loss(tokens, lm.initial_state(2), scored=[[True, True]] * 5)
    for value, shown in ((-1.0, "-1.0"), (float("nan"), "nan"), (2, "2")):  # a flag is 0 or 1: no weight, no NaN
        with pytest.raises(ValueError, match=rf"^scored holds {shown}; expected flags: a bool tensor, or one of 0 "):
            lm.loss(tokens, lm.initial_state(2), scored=torch.full((5, 2), value))
    assert torch.isfinite(lm.loss(tokens, lm.initial_state(2), scored=torch.ones(5, 2))[0])
    with pytest.raises(ValueError, match=r"^future_weight=-1: expected a number >= 0$"):
        lm.loss(tokens, lm.initial_state(2), future_weight=-1)
    with pytest.raises(ValueError, match=r"^threshold=nan: expected a finite number \(a confidence: above 1, no "):
        lm.early_exit_loss(tokens, lm.initial_state(2), float("nan"))


def test_initial_state_names_a_batch_size_that_is_no_count(lm):
    for batch_size in (0, -1, 2.5, "2"):
        with pytest.raises(ValueError, match=rf"^batch_size={batch_size!r}: expected an integer >= 1$"):
            lm.initial_state(batch_size)


@pytest.mark.parametrize(("options", "message"), [
    ({"n_tokens": -1}, r"^n_tokens=-1: expected an integer >= 0 \(0: no token\)$"),
    ({"n_tokens": 1.5}, r"^n_tokens=1.5: expected an integer >= 0"),
    ({"n_tokens": "2"}, r"^n_tokens='2': expected an integer >= 0"),
    ({"n_tokens": True}, r"^n_tokens=True: expected an integer >= 0"),
    ({"n_tokens": 2, "temperature": -1}, r"^temperature=-1: expected a number >= 0 \(0: greedy\)$"),
    ({"n_tokens": 2, "temperature": float("nan")}, r"^temperature=nan: expected a number >= 0"),
    ({"n_tokens": 2, "temperature": float("inf")}, r"^temperature=inf: expected a number >= 0"),
])
def test_generate_names_a_bad_count_or_temperature(lm, options, message):
    """Mutation caught: `torch.stack`'s error on no token, a `TypeError` from `range`, a negative temperature
    sampled as if it were positive."""
    tokens = torch.randint(VOCAB, (5, 2))
    _, state, _ = lm.loss(tokens, lm.initial_state(2))
    with pytest.raises(ValueError, match=message):
        lm.generate(tokens[-1], state, **options)


def test_generate_of_no_token_is_empty_and_bad_last_tokens_are_named(lm):
    """`n_tokens=0` gives `[0, B]` (mutation caught: `torch.stack`'s error); `last` is checked as tokens are."""
    tokens = torch.randint(VOCAB, (5, 2))
    _, state, _ = lm.loss(tokens, lm.initial_state(2))
    empty = lm.generate(tokens[-1], state, n_tokens=0)
    assert empty.shape == (0, 2) and empty.dtype == torch.long
    assert lm.generate(tokens[-1], state, n_tokens=3, temperature=0.5).shape == (3, 2)
    with pytest.raises(ValueError, match=r"^last=16: expected an integer in \[0, 15\]"):
        lm.generate(torch.full((2,), VOCAB), state, n_tokens=2)
    with pytest.raises(ValueError, match=r"^last is a torch.int64 tensor of shape \(1, 2\); expected an integer "
                                         r"tensor of token ids \[B\]"):
        lm.generate(tokens[-1:], state, n_tokens=2)
