"""Token streams for the language-model workbench, read from files every machine has or generated.

- `python`: the byte-level text of the Python standard library's `.py` sources (the
  interpreter running engram ships them, so nothing is downloaded). Files are sorted by their
  path relative to the standard library; every tenth file (index `0, 10, 20, ...`) is the
  validation split, the rest the training split. Each file is a document: its first byte starts one.
- `copy`: blocks of `distance` random tokens, each followed by an exact copy of itself. The
  second half of every pair can only be predicted by a memory reaching `distance` tokens back,
  so a model whose memory is shorter stays at chance on it (`ln(vocab - 1)` nats per token).
- `associative-recall`: records of `n_pairs` key-value pairs, then a query key whose next token
  is the value paired with it (`associative_recall`). Only the answers are scored.

A stream is cut into `batch_size` contiguous rows read in parallel, segment after segment
(Transformer-XL's training scheme, Dai et al. 2019): consecutive segments share one token, the
last input of one being the first of the next, so the memory carries over between them. A stream
may mark the tokens evaluation scores as targets (`scored`); by default it scores every one.
"""

from __future__ import annotations

import functools
import math
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

BYTE_VOCAB = 256
VALIDATION_EVERY = 10
SPLITS = ("train", "validation")


@dataclass(frozen=True)
class TokenStream:
    """A stream of `tokens` `[N]` (int64) with `starts` `[N]` (bool) marking document starts and
    `scored` `[N]` (bool) the tokens whose prediction evaluation scores (`None`: every token)."""

    tokens: Tensor
    starts: Tensor
    vocab_size: int
    scored: Tensor | None = None

    def __len__(self) -> int:
        return self.tokens.numel()


def python_sources() -> list[Path]:
    """The standard library's `.py` files (no site-packages), sorted by relative path."""
    return list(_python_sources())


@functools.cache
def _python_sources() -> tuple[Path, ...]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [path for path in root.rglob("*.py") if "site-packages" not in path.relative_to(root).parts]
    return tuple(sorted(files, key=lambda path: path.relative_to(root).as_posix()))


def _is_split(index: int, split: str) -> bool:
    """Whether the file at `index` of `python_sources` belongs to `split`."""
    return (index % VALIDATION_EVERY == 0) == (split == "validation")


@functools.cache
def python_split_bytes(split: str) -> int:
    """The bytes of every file of `split` (read from their sizes; nothing is read)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    return sum(path.stat().st_size for index, path in enumerate(_python_sources()) if _is_split(index, split))


def python_corpus(split: str, max_bytes: int) -> TokenStream:
    """The first `max_bytes` bytes of the `split` files of `python_sources`."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    chunks, starts, total = [], [], 0
    for index, path in enumerate(python_sources()):
        if not _is_split(index, split):
            continue
        data = path.read_bytes()[:max_bytes - total]
        if not data:
            continue
        starts.append(total)
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    tokens = torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8).long()
    start_flags = torch.zeros(total, dtype=torch.bool)
    start_flags[starts] = True
    return TokenStream(tokens, start_flags, BYTE_VOCAB)


def copy_task(n_tokens: int, vocab_size: int, distance: int, seed: int) -> TokenStream:
    """Blocks of `distance` tokens drawn uniformly from `1..vocab_size-1`, each repeated once."""
    if distance < 1 or vocab_size < 2:
        raise ValueError(f"the copy task needs distance >= 1 and vocab_size >= 2, got {distance} and {vocab_size}")
    generator = torch.Generator().manual_seed(seed)
    n_blocks = -(-n_tokens // (2 * distance))
    blocks = torch.randint(1, vocab_size, (n_blocks, 1, distance), generator=generator)
    tokens = blocks.expand(-1, 2, -1).reshape(-1)[:n_tokens]
    starts = torch.zeros(n_tokens, dtype=torch.bool)
    starts[0] = True
    return TokenStream(tokens.clone(), starts, vocab_size)


QUERY = 0
"""associative recall's query token, between a record's pairs and its query key"""


def associative_recall(n_tokens: int, vocab_size: int, n_pairs: int, seed: int) -> TokenStream:
    """Records `k_1 v_1 … k_n v_n Q k_q v_q` of `2 n + 3` tokens, `n = n_pairs`, each a document.

    Associative recall as in Ba et al. 2016 (*Using Fast Weights to Attend to the Recent Past*,
    Sec. 4.1) and H3's and Zoology's recall tasks (Fu et al. 2023, Arora et al. 2023), with one query
    per record: the keys are distinct, drawn without replacement from `1 … K`, `K = (vocab_size - 1) // 2`;
    the values uniformly, with replacement, from the disjoint half `K + 1 … vocab_size - 1`; `Q` is
    token `QUERY`; `q` is uniform over the record's pairs. The answer `v_q` (the record's
    last token) is the only scored token: predicting it takes attention from the query key back to
    its pair, up to `2 n + 1` tokens earlier, and without that reach it is at chance,
    `log2(vocab_size - 1 - K)` bits. The last record may be cut short by `n_tokens`.

    Raises:
        ValueError: `n_pairs` outside `1 … K` (the message names it and the range).
    """
    n_keys = (vocab_size - 1) // 2
    if not 1 <= n_pairs <= n_keys:
        raise ValueError(f"associative recall needs n_pairs in 1..{n_keys} ((vocab_size - 1) // 2 distinct keys for "
                         f"vocab_size {vocab_size}), got n_pairs = {n_pairs}")
    generator = torch.Generator().manual_seed(seed)
    length = 2 * n_pairs + 3
    n_records = -(-n_tokens // length)
    keys = torch.rand(n_records, n_keys, generator=generator).argsort(dim=1)[:, :n_pairs] + 1
    values = torch.randint(n_keys + 1, vocab_size, (n_records, n_pairs), generator=generator)
    query = torch.randint(n_pairs, (n_records, 1), generator=generator)
    records = torch.cat([torch.stack([keys, values], dim=2).flatten(1), torch.full((n_records, 1), QUERY),
                         keys.gather(1, query), values.gather(1, query)], dim=1)
    starts, scored = torch.zeros_like(records, dtype=torch.bool), torch.zeros_like(records, dtype=torch.bool)
    starts[:, 0], scored[:, -1] = True, True
    return TokenStream(records.flatten()[:n_tokens], starts.flatten()[:n_tokens], vocab_size,
                       scored.flatten()[:n_tokens])


DATASETS = ("python", "copy", "associative-recall")


def make_stream(name: str, split: str, *, max_bytes: int, n_tokens: int, vocab_size: int, distance: int,
                n_pairs: int, seed: int) -> TokenStream:
    """The stream `name` (one of `DATASETS`); the synthetic tasks' splits differ by their seed
    (`n_tokens` and `vocab_size` are theirs, `distance` the copy task's, `n_pairs` associative recall's)."""
    synthetic_seed = seed + (1 if split == "validation" else 0)
    if name == "python":
        return python_corpus(split, max_bytes)
    if name == "copy":
        return copy_task(n_tokens, vocab_size, distance, synthetic_seed)
    if name == "associative-recall":
        return associative_recall(n_tokens, vocab_size, n_pairs, synthetic_seed)
    raise ValueError(f"unknown data {name!r}; valid data: {', '.join(DATASETS)}")


def stream_length(name: str, split: str, *, max_bytes: int, n_tokens: int) -> int:
    """The tokens of the stream `make_stream` makes, without making it: `python`'s first `max_bytes` bytes of the
    split's files, the synthetic tasks' `n_tokens`."""
    if name == "python":
        return min(max_bytes, python_split_bytes(split))
    if name in DATASETS:
        return n_tokens
    raise ValueError(f"unknown data {name!r}; valid data: {', '.join(DATASETS)}")


TOKEN_BYTES = 11
"""bytes a stream holds per token while it is read: the token (int64), its start and scored flags, and the
flags `segments` makes of them"""


def stream_bytes(name: str, n_tokens: int, *, vocab_size: int, n_pairs: int) -> int:
    """About the most bytes a stream of `n_tokens` holds at once, made and read: `TOKEN_BYTES` per token, plus
    what making it takes (the copy task's blocks and their copy; associative recall's shuffle of its keys,
    a float and an index per key of every record)."""
    if name == "copy":
        return n_tokens * (TOKEN_BYTES + 16)
    if name == "associative-recall":
        records, keys = math.ceil(n_tokens / (2 * n_pairs + 3)), max((vocab_size - 1) // 2, 0)
        return n_tokens * (TOKEN_BYTES + 16) + records * keys * 12
    return n_tokens * (TOKEN_BYTES + 3)  # the file's bytes, joined, as a tensor


def rows_fit(length: int, batch_size: int, segment_length: int) -> bool:
    """Whether `length` tokens in `batch_size` rows hold a segment and its last target per row."""
    return length // batch_size >= segment_length + 1


def segments(stream: TokenStream, batch_size: int, segment_length: int, first: int = 0
             ) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """`(tokens, starts, scored)` of shape `[T + 1, B]` for segment `first`, `first + 1`, ... of
    the `B` parallel rows, forever: after the last full segment the rows start over, with a document
    start on their first token."""
    T = segment_length
    row = len(stream) // batch_size
    if not rows_fit(len(stream), batch_size, T):
        raise ValueError(f"a stream of {len(stream)} tokens is too short for {batch_size} rows of "
                         f"segments of {T} tokens")
    tokens = stream.tokens[:row * batch_size].view(batch_size, row).T  # [row, B]
    starts = stream.starts[:row * batch_size].view(batch_size, row).T.clone()
    starts[0] = True
    scored = (torch.ones_like(stream.starts) if stream.scored is None else stream.scored)[:row * batch_size]
    scored = scored.view(batch_size, row).T
    per_pass = (row - 1) // T
    index = first
    while True:
        begin = (index % per_pass) * T
        yield tokens[begin:begin + T + 1], starts[begin:begin + T + 1], scored[begin:begin + T + 1]
        index += 1
