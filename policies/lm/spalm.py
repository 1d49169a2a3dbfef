"""SPALM-style gated retrieval (Yogatama et al. 2021, "Adaptive Semiparametric Language Models"): the
language model's final hidden state mixed, by a gate that depends on the context, with an attention
over the output embeddings of the tokens that followed the nearest stored contexts."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from policies.lm.knn import Datastore, segment_keys
from policies.lm.model import MemoryLanguageModel, scored_mean
from policies.window import State

TRUST_LM_BIAS = 3.0
"""initial gate bias: ``g = σ(3) ≈ 0.95``, so a trained LM starts out nearly unchanged"""


class GatedRetrieval(nn.Module):
    """The long-term memory read and gate of SPALM (Yogatama et al. 2021, Sec. 2.3). For a final hidden
    state `h_t` and the tokens `y_1 … y_k` that followed its `k` nearest stored contexts
    (`Datastore`), with `e_y` the output embedding of token `y` (row `y` of
    the LM's head):

    `m_t = Σ_i softmax_i(e_{y_i}ᵀ h_t) e_{y_i}`,  `g_t = σ(w_gᵀ h_t + b_g)`,
    `z_t = g_t h_t + (1 − g_t) m_t`,  `p(x_{t+1} | x_≤t) = softmax(head(z_t))`.

    The datastore's keys come from the trained LM and stay fixed (as in the paper, retrieval is not
    trained end to end); the gate's `w_g`, `b_g` are trained with the LM frozen or, as in the paper,
    together with it (`train_rl.py lm eval --spalm-steps N [--spalm-lm-lr LR]`). Unlike kNN-LM's fixed
    `λ`, the gate decides per token how much to trust the neighbours.
    """

    def __init__(self, d_model: int, gate_bias: float = TRUST_LM_BIAS) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, 1)
        nn.init.zeros_(self.gate.weight)
        nn.init.constant_(self.gate.bias, gate_bias)

    def forward(self, hidden: Tensor, neighbours: Tensor, output_embedding: Tensor) -> tuple[Tensor, Tensor]:
        """`z` `[Q, D]` and the gate `g` `[Q, 1]` for hidden states `[Q, D]`, neighbour tokens
        `[Q, k]` and the output embedding `[vocab, D]`."""
        embedded = output_embedding[neighbours]  # [Q, k, D]
        weights = torch.softmax(torch.einsum("qkd,qd->qk", embedded, hidden), dim=-1)
        memory = torch.einsum("qk,qkd->qd", weights, embedded)
        gate = torch.sigmoid(self.gate(hidden))
        return gate * hidden + (1 - gate) * memory, gate


def spalm_log_probs(model: MemoryLanguageModel, retrieval: GatedRetrieval, hidden: Tensor, datastore: Datastore,
                    k: int) -> tuple[Tensor, Tensor]:
    """Next-token log-probabilities `[Q, vocab]` and gates `[Q, 1]` of final hidden states `[Q, D]`."""
    neighbours = datastore.neighbour_tokens(hidden.detach(), k)
    mixed, gate = retrieval(hidden, neighbours, model.head.weight)
    return torch.log_softmax(model.head(mixed), dim=-1), gate


def spalm_loss(model: MemoryLanguageModel, retrieval: GatedRetrieval, tokens: Tensor, state: State,
               datastore: Datastore, k: int, starts: Tensor | None = None, scored: Tensor | None = None
               ) -> tuple[Tensor, Tensor, State]:
    """Mean next-token cross-entropy (nats) of a segment `[T + 1, B]` under SPALM and the mean gate, both
    over the targets `scored` marks (`scored_mean`), and the state after it."""
    hidden, targets, state = segment_keys(model, tokens, state, starts)
    log_probs, gate = spalm_log_probs(model, retrieval, hidden, datastore, k)
    nats = F.nll_loss(log_probs, targets, reduction="none")
    return scored_mean(nats, scored), scored_mean(gate.squeeze(1), scored), state
