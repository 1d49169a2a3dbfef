"""The language-model variant shares the backbones: segment recurrence, cached generation, and
learning that needs the memory carried across segments."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

from policies import BACKBONES
from policies.lm.depths import forward_with_depths
from policies.lm.model import MemoryLanguageModel
from tests.conftest import TRANSFORMERS, small_options

VOCAB = 16
OPTIONS = {"d_model": 32, "n_heads": 2, "memory_length": 24}


@pytest.mark.parametrize("backbone", [*TRANSFORMERS, "linear"])
def test_segments_with_memory_equal_one_pass(backbone):
    torch.manual_seed(0)
    lm = MemoryLanguageModel(VOCAB, backbone, d_embed=16, **small_options(backbone, **OPTIONS)).eval()
    tokens = torch.randint(VOCAB, (18, 3))
    starts = torch.zeros_like(tokens, dtype=torch.bool)
    starts[0], starts[11, 1] = True, True  # a document boundary inside the second segment
    with torch.no_grad():
        whole, _, _ = lm(tokens, lm.initial_state(3), starts)
        state, parts = lm.initial_state(3), []
        for begin in range(0, 18, 6):
            logits, state, _ = lm(tokens[begin:begin + 6], state, starts[begin:begin + 6])
            parts.append(logits)
    torch.testing.assert_close(torch.cat(parts), whole, atol=1e-5, rtol=0)


def test_cached_generation_equals_teacher_forcing():
    torch.manual_seed(0)
    lm = MemoryLanguageModel(VOCAB, "gtrxl", d_embed=16, **OPTIONS).eval()
    prompt = torch.randint(VOCAB, (7, 2))
    _, state, _ = lm.loss(prompt, lm.initial_state(2))
    generated = lm.generate(prompt[-1], state, n_tokens=10)
    with torch.no_grad():
        logits, _, _ = lm(torch.cat([prompt[-1:], generated[:-1]]), state)
    assert torch.equal(logits.argmax(-1), generated)


def periodic_documents(n_docs: int, period: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """Each column is a document: a random pattern of ``period`` tokens repeated."""
    pattern = torch.randint(VOCAB, (period, n_docs), generator=generator)
    return pattern.repeat(length // period, 1)


def train_and_score(carry_memory: bool) -> float:
    """Train on segments of 3 tokens of period-6 documents; return the held-out loss from the
    second period on. Only a memory carried across segments can see one period back."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    lm = MemoryLanguageModel(VOCAB, "gtrxl", d_embed=32, d_model=32, n_heads=2, n_layers=1, memory_length=12)
    optimizer = torch.optim.Adam(lm.parameters(), lr=1e-2)
    T, period, length = 3, 6, 24

    def segments(docs: torch.Tensor) -> Iterator[tuple[int, torch.Tensor]]:
        for begin in range(0, length - T, T):
            yield begin, docs[begin:begin + T + 1]

    for _ in range(60):
        state = lm.initial_state(32)
        for _, segment in segments(periodic_documents(32, period, length, generator)):
            loss, state, _ = lm.loss(segment, state if carry_memory else lm.initial_state(32))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    state, losses = lm.initial_state(64), []
    with torch.no_grad():
        for begin, segment in segments(periodic_documents(64, period, length, generator)):
            loss, state, _ = lm.loss(segment, state if carry_memory else lm.initial_state(64))
            if begin >= period:
                losses.append(loss.item())
    return sum(losses) / len(losses)


@pytest.mark.slow
def test_memory_across_segments_is_what_makes_the_task_learnable():
    with_memory, without = train_and_score(True), train_and_score(False)
    # log(16) = 2.77 is chance. Where training ends between 0.25 and 0.8 depends on the thread count
    # (float summation order), so the bound leaves room: without memory the loss stays near chance.
    assert with_memory < 0.35 * math.log(VOCAB), with_memory
    assert without > 0.6 * math.log(VOCAB), without


def test_the_lm_and_the_policy_share_the_backbone_classes():
    """One implementation per name: the LM's backbone is an instance of the registry's class."""
    for name in [*TRANSFORMERS, "linear"]:
        lm = MemoryLanguageModel(VOCAB, name, d_embed=16, **small_options(name, **OPTIONS))
        assert type(lm.backbone) is BACKBONES[name].cls


def losses_with_and_without(model_options: dict, **weights: float):
    """A small GTrXL language model, a segment, its state, and the segment's loss without and with the
    auxiliary loss ``weights``."""
    torch.manual_seed(0)
    lm = MemoryLanguageModel(VOCAB, "gtrxl", d_embed=16, **model_options, **OPTIONS)
    tokens = torch.randint(VOCAB, (9, 3))
    state = lm.initial_state(3)
    return lm, tokens, state, lm.loss(tokens, state)[0], lm.loss(tokens, state, **weights)[0]


def test_future_targets_add_the_multiple_targets_loss():
    """Al-Rfou et al. (2019): head k predicts the token k + 2 ahead; its loss joins only with a weight,
    and the next-token loss (what evaluation reports) is unchanged by the extra heads."""
    lm, tokens, state, plain, with_future = losses_with_and_without(dict(future_targets=2), future_weight=0.5)
    logits, _, _ = lm(tokens[:-1], state)
    third = torch.nn.functional.cross_entropy(lm.future_heads[1](lm.hidden_states(tokens[:-1], state)[0][:-2])
                                              .flatten(0, 1), tokens[3:].flatten())
    second = torch.nn.functional.cross_entropy(lm.future_heads[0](lm.hidden_states(tokens[:-1], state)[0][:-1])
                                               .flatten(0, 1), tokens[2:].flatten())
    torch.testing.assert_close(plain, torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[1:].flatten()))
    torch.testing.assert_close(with_future, plain + 0.5 * (second + third) / 2)
    with_future.backward()
    assert all(head.weight.grad is not None for head in lm.future_heads)


def test_intermediate_layer_losses_read_every_inner_layer():
    """Al-Rfou et al. (2019): the shared head's next-token loss on the output of each layer below the
    top (the next depth's input), averaged and weighted; gradient reaches the lower layer through it."""
    lm, tokens, state, plain, with_layers = losses_with_and_without(dict(n_layers=3), intermediate_weight=0.3)
    _, depths, _, _ = forward_with_depths(lm.backbone, lm.embedding(tokens[:-1]), state,
                                                      torch.zeros(8, 3, dtype=torch.bool))
    inner = [torch.nn.functional.cross_entropy(lm.head(depths[:, :, n]).flatten(0, 1), tokens[1:].flatten())
             for n in (1, 2)]
    torch.testing.assert_close(with_layers, plain + 0.3 * (inner[0] + inner[1]) / 2)


@pytest.mark.parametrize("backbone", list(BACKBONES))
def test_the_state_loss_returns_is_detached_so_every_backbone_trains_segment_after_segment(backbone):
    """Two optimiser steps on consecutive segments, the second from the state the first returned (mutation caught:
    FrameStack's and the MLP's windows kept the first segment's graph, and the second backward failed)."""
    torch.manual_seed(0)
    lm = MemoryLanguageModel(VOCAB, backbone, d_embed=16, **small_options(backbone, **OPTIONS))
    optimizer = torch.optim.Adam(lm.parameters(), lr=1e-3)
    tokens, state = torch.randint(VOCAB, (17, 2)), lm.initial_state(2)
    for begin in (0, 8):
        loss, state, _ = lm.loss(tokens[begin:begin + 9], state)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert math.isfinite(loss.item())
