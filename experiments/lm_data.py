"""Token streams for the language-model workbench, read from files every machine has or generated.

- ``python``: the byte-level text of the Python standard library's ``.py`` sources (the
  interpreter running engram ships them, so nothing is downloaded). Files are sorted by their
  path relative to the standard library; every tenth file (index ``0, 10, 20, ...``) is the
  validation split, the rest the training split. Each file is a document: its first byte starts one.
- ``copy``: blocks of ``distance`` random tokens, each followed by an exact copy of itself. The
  second half of every pair can only be predicted by a memory reaching ``distance`` tokens back,
  so a model whose memory is shorter stays at chance on it (``ln(vocab - 1)`` nats per token).

A stream is cut into ``batch_size`` contiguous rows read in parallel, segment after segment
(Transformer-XL's training scheme, Dai et al. 2019): consecutive segments share one token, the
last input of one being the first of the next, so the memory carries over between them.
"""

from __future__ import annotations

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
    """A stream of ``tokens`` ``[N]`` (int64) with ``starts`` ``[N]`` (bool) marking document starts."""

    tokens: Tensor
    starts: Tensor
    vocab_size: int

    def __len__(self) -> int:
        return self.tokens.numel()


def python_sources() -> list[Path]:
    """The standard library's ``.py`` files (no site-packages), sorted by relative path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [path for path in root.rglob("*.py") if "site-packages" not in path.relative_to(root).parts]
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def python_corpus(split: str, max_bytes: int) -> TokenStream:
    """The first ``max_bytes`` bytes of the ``split`` files of :func:`python_sources`."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    chunks, starts, total = [], [], 0
    for index, path in enumerate(python_sources()):
        if (index % VALIDATION_EVERY == 0) != (split == "validation"):
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
    """Blocks of ``distance`` tokens drawn uniformly from ``1..vocab_size-1``, each repeated once."""
    if distance < 1 or vocab_size < 2:
        raise ValueError(f"the copy task needs distance >= 1 and vocab_size >= 2, got {distance} and {vocab_size}")
    generator = torch.Generator().manual_seed(seed)
    n_blocks = -(-n_tokens // (2 * distance))
    blocks = torch.randint(1, vocab_size, (n_blocks, 1, distance), generator=generator)
    tokens = blocks.expand(-1, 2, -1).reshape(-1)[:n_tokens]
    starts = torch.zeros(n_tokens, dtype=torch.bool)
    starts[0] = True
    return TokenStream(tokens.clone(), starts, vocab_size)


DATASETS = ("python", "copy")


def make_stream(name: str, split: str, *, max_bytes: int, n_tokens: int, vocab_size: int, distance: int,
                seed: int) -> TokenStream:
    """The stream ``name`` (one of :data:`DATASETS`); the copy task's splits differ by their seed."""
    if name == "python":
        return python_corpus(split, max_bytes)
    if name == "copy":
        return copy_task(n_tokens, vocab_size, distance, seed + (1 if split == "validation" else 0))
    raise ValueError(f"unknown data {name!r}; valid data: {', '.join(DATASETS)}")


def segments(stream: TokenStream, batch_size: int, segment_length: int, first: int = 0
             ) -> Iterator[tuple[Tensor, Tensor]]:
    """``(tokens, starts)`` of shape ``[T + 1, B]`` for segment ``first``, ``first + 1``, ... of the
    ``B`` parallel rows, forever: after the last full segment the rows start over, with a document
    start on their first token."""
    T = segment_length
    row = len(stream) // batch_size
    if row < T + 1:
        raise ValueError(f"a stream of {len(stream)} tokens is too short for {batch_size} rows of "
                         f"segments of {T} tokens")
    tokens = stream.tokens[:row * batch_size].view(batch_size, row).T  # [row, B]
    starts = stream.starts[:row * batch_size].view(batch_size, row).T.clone()
    starts[0] = True
    per_pass = (row - 1) // T
    index = first
    while True:
        begin = (index % per_pass) * T
        yield tokens[begin:begin + T + 1], starts[begin:begin + T + 1]
        index += 1
