"""kNN-LM (Khandelwal et al. 2020): a language model's next-token distribution interpolated with
one read off its nearest neighbours in a datastore of (context representation, next token) pairs."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from envs.rules import Range
from policies.lm.model import MemoryLanguageModel, scored_mean
from policies.window import State

QUERY_CHUNK = 1024
"""queries searched at once (bounds the ``[chunk, N]`` distance matrix)"""


class Datastore:
    """Keys `[N, D]` (the LM's final hidden state at each training position) and values `[N]`
    (the token that followed), searched exactly by squared Euclidean distance.

    `knn_log_probs` is `log p_kNN(w | x) = log Σ_{i ∈ kNN(q)} 1[v_i = w] exp(−d(q, k_i)) − log Z`
    (Khandelwal et al. 2020, Eq. 2), with `Z` the sum over the `k` neighbours.
    """

    def __init__(self, keys: Tensor, values: Tensor, vocab_size: int) -> None:
        if keys.dim() != 2 or values.shape != keys.shape[:1]:
            raise ValueError(f"keys must be [N, D] and values [N], got {tuple(keys.shape)} and {tuple(values.shape)}")
        self.keys, self.values, self.vocab_size = keys, values.long(), vocab_size

    def __len__(self) -> int:
        return self.keys.shape[0]

    def search(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """The `k` nearest keys of queries `[Q, D]`: their squared distances and indices, each `[Q, k]`."""
        Range(1, len(self), integer=True, note="at most the datastore size").check("k", k)
        found = [torch.cdist(chunk, self.keys).pow(2).topk(k, dim=-1, largest=False)
                 for chunk in queries.split(QUERY_CHUNK)]  # each [chunk, N] distances at most
        return torch.cat([d for d, _ in found]), torch.cat([i for _, i in found])

    def neighbour_tokens(self, queries: Tensor, k: int) -> Tensor:
        """`[Q, k]`: the tokens that followed the `k` nearest stored contexts of each query."""
        return self.values[self.search(queries, k)[1]]

    def knn_log_probs(self, queries: Tensor, k: int) -> Tensor:
        """`log p_kNN` `[Q, vocab]` for queries `[Q, D]` (`−inf` for tokens no neighbour holds)."""
        out = []
        for chunk in queries.split(QUERY_CHUNK):
            nearest, index = self.search(chunk, k)
            scores = torch.full((chunk.shape[0], self.vocab_size), float("-inf"), dtype=chunk.dtype,
                                device=chunk.device)
            # log Σ over the neighbours holding each token: scatter exp, then log (stable: shift by the max)
            shift = (-nearest).amax(dim=-1, keepdim=True)
            mass = torch.zeros_like(scores).scatter_add_(1, self.values[index], (-nearest - shift).exp())
            scores = torch.where(mass > 0, mass.log() + shift, scores)
            out.append(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
        return torch.cat(out)


def interpolate(lm_log_probs: Tensor, knn_log_probs: Tensor, weight: float) -> Tensor:
    """`log(λ p_kNN + (1 − λ) p_LM)` (Khandelwal et al. 2020, Eq. 3), `λ = weight` in `[0, 1]`."""
    Range(0.0, 1.0).check("weight", weight)
    if weight == 0.0:
        return lm_log_probs
    if weight == 1.0:
        return knn_log_probs
    return torch.logaddexp(lm_log_probs + math.log(1 - weight), knn_log_probs + math.log(weight))


def segment_keys(model: MemoryLanguageModel, tokens: Tensor, state: State, starts: Tensor | None = None
                 ) -> tuple[Tensor, Tensor, State]:
    """Datastore entries of a segment `tokens` `[T + 1, B]`: the keys `[T·B, D]` (final hidden states
    of the inputs `tokens[:-1]`), the values `[T·B]` (the tokens that followed) and the state after it."""
    hidden, state, _ = model.hidden_states(tokens[:-1], state, None if starts is None else starts[:-1])
    return hidden.flatten(0, 1), tokens[1:].flatten(), state


def knn_lm_loss(model: MemoryLanguageModel, tokens: Tensor, state: State, datastore: Datastore, k: int,
                weight: float, starts: Tensor | None = None, scored: Tensor | None = None) -> tuple[Tensor, State]:
    """Mean next-token cross-entropy (nats) of a segment under the kNN-LM mixture (over the targets
    `scored` marks, `scored_mean`), and the state after it; with `weight` 0 it is
    the LM's own `loss`."""
    queries, targets, state = segment_keys(model, tokens, state, starts)
    lm_log_probs = torch.log_softmax(model.head(queries), dim=-1)
    mixed = interpolate(lm_log_probs, datastore.knn_log_probs(queries, k), weight)
    return scored_mean(-mixed.gather(1, targets.unsqueeze(1)).squeeze(1), scored), state
