"""Associative recall (Ba et al. 2016; H3, Zoology): the record layout, its seeds and options, scoring
only the answers, and memory that matters on it."""

from __future__ import annotations

import math
from itertools import islice
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import train_rl
from lm.data import QUERY, associative_recall, segments
from lm.workbench import KNNSettings, bits_per_token, build_lm_config, train_lm
from policies.lm.knn import Datastore
from policies.lm.model import MemoryLanguageModel

VOCAB, PAIRS = 12, 3  # keys 1..5, values 6..11, records of 9 tokens
LENGTH = 2 * PAIRS + 3


def test_every_answer_is_the_value_paired_with_its_query_key():
    stream = associative_recall(40 * LENGTH + 4, VOCAB, PAIRS, seed=0)  # the last record cut after 4 tokens
    records = stream.tokens[:40 * LENGTH].view(40, LENGTH)
    keys, values = records[:, :2 * PAIRS:2], records[:, 1:2 * PAIRS:2]
    assert all(len(set(row.tolist())) == PAIRS for row in keys)  # drawn without replacement
    assert keys.min() >= 1 and keys.max() <= 5 and values.min() >= 6 and values.max() <= VOCAB - 1
    assert (records[:, 2 * PAIRS] == QUERY).all()
    for row, key_row, value_row in zip(records, keys, values, strict=True):
        assert row[-1] == value_row[key_row.tolist().index(row[-2])]
    expected = torch.zeros(41 * LENGTH, dtype=torch.bool)
    assert torch.equal(stream.starts, expected.index_fill(0, torch.arange(0, 41 * LENGTH, LENGTH), True)[:-5])
    assert torch.equal(stream.scored, expected.index_fill(0, torch.arange(LENGTH - 1, 40 * LENGTH, LENGTH), True)[:-5])
    assert len({tuple(keys[:, 0].tolist())}) == 1 and len(set(records[:, -2].tolist())) > 1


def test_a_seed_gives_one_stream_and_seeds_differ():
    first, again = associative_recall(500, VOCAB, PAIRS, seed=4), associative_recall(500, VOCAB, PAIRS, seed=4)
    assert torch.equal(first.tokens, again.tokens)
    assert not torch.equal(first.tokens, associative_recall(500, VOCAB, PAIRS, seed=5).tokens)


@pytest.mark.parametrize("n_pairs", [0, 6])
def test_a_bad_number_of_pairs_names_it_and_the_valid_range(n_pairs, tmp_path, capsys):
    with pytest.raises(ValueError, match=rf"n_pairs in 1\.\.5 .*vocab_size 12.*got n_pairs = {n_pairs}"):
        associative_recall(100, VOCAB, n_pairs, seed=0)
    assert train_rl.main(["lm", "train", "-p", "data=associative-recall", f"recall_pairs={n_pairs}",
                          "recall_vocab=12", f"log_dir={tmp_path}"]) == 2
    expected = ("recall_pairs=0: expected an integer >= 1" if n_pairs == 0 else
                "recall_pairs=6: a record holds distinct keys, of which recall_vocab=12 has (recall_vocab - 1) // 2 "
                "= 5; expected recall_pairs <= 5")
    assert expected in capsys.readouterr().err


def test_evaluation_scores_only_the_answers(tmp_path):
    """``bits_per_token`` on a recall stream is the mean cross-entropy of the answers alone, with and
    without the kNN-LM path, computed here from the model's logits segment by segment."""
    config = build_lm_config(None, ["data=associative-recall", "backbone=trxl", f"log_dir={tmp_path}",
                                    "segment_length=8", "batch_size=4", "d_embed=16", "backbone_options.d_model=16",
                                    "backbone_options.n_heads=2", "backbone_options.n_layers=1",
                                    "backbone_options.memory_length=8"])
    torch.manual_seed(0)
    model = MemoryLanguageModel(VOCAB, backbone="trxl", d_embed=16, **config.backbone_options).eval()
    stream = associative_recall(2000, VOCAB, PAIRS, seed=1)
    state, answers, every = model.initial_state(4), [], []
    with torch.no_grad():
        for tokens, starts, scored in islice(segments(stream, 4, 8), 6):
            logits, state, _ = model(tokens[:-1], state, starts[:-1])
            nats = F.cross_entropy(logits.flatten(0, 1), tokens[1:].flatten(), reduction="none")
            answers.append(nats[scored[1:].flatten()])
            every.append(nats)
    expected = torch.cat(answers).mean().item() / math.log(2)
    assert not math.isclose(expected, torch.cat(every).mean().item() / math.log(2), rel_tol=1e-2)
    assert math.isclose(bits_per_token(model, stream, config, 6), expected, rel_tol=1e-5)
    datastore = Datastore(torch.randn(10, 16), torch.randint(0, VOCAB, (10,)), VOCAB)
    assert math.isclose(bits_per_token(model, stream, config, 6, KNNSettings(datastore, k=3, weight=0.0)), expected,
                        rel_tol=1e-5)


def recall_config(tmp_path: Path, memory_length: int):
    return build_lm_config(None, [
        "data=associative-recall", "backbone=trxl-i", f"log_dir={tmp_path}", "steps=200", "segment_length=8",
        "batch_size=16", "eval_every=200", "checkpoint_every=200", "eval_segments=8", "learning_rate=3e-3",
        "recall_vocab=8", "recall_pairs=2", "recall_tokens=20000", "d_embed=32", "max_grad_norm=1.0",
        "backbone_options.d_model=32", "backbone_options.n_heads=2", "backbone_options.n_layers=1",
        f"backbone_options.memory_length={memory_length}"])


@pytest.mark.slow  # long: run by make test-slow
def test_memory_matters_on_associative_recall(tmp_path):
    """Records of 2 pairs (7 tokens; 3 keys, 4 values, chance log2(4) = 2 bits per answer), segments of 8,
    same budget. With memory 8 every query sees its whole record and the model learns to recall
    (measured 1.03 bits after 200 segments); with memory 1 a query sees only as far back as its place
    in the segment (plus one token), the first pair only from the segment's second half, and the model
    stays at chance (2.07)."""
    with_memory = train_lm(recall_config(tmp_path / "long", 8))["valid_bits_per_token"]
    without = train_lm(recall_config(tmp_path / "short", 1))["valid_bits_per_token"]
    assert with_memory < 0.6 * 2, with_memory
    assert without > 0.9 * 2, without
