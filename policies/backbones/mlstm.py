"""The `mlstm` backbone: the matrix-memory LSTM of xLSTM (Beck et al., NeurIPS 2024, "xLSTM: Extended Long
Short-Term Memory")."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.rules import Count, CountOrNone
from policies.backbones.scan import CarryMemory, keep, linear_scan, through_layers
from policies.backbones.transformer_xl import HEADS_DIVIDE_D_MODEL
from policies.options import checked


def mlstm_chunk(q: Tensor, k: Tensor, v: Tensor, i_tilde: Tensor, log_f: Tensor, starts: Tensor,
                carry: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
    """The stabilised mLSTM over `L` steps at once from the carry `(C̃, ñ, m)`: what `L` recurrent steps give.

    `q`, `k`, `v` `[B, H, L, d]`; `i_tilde` and `log_f` `[B, H, L]`; `starts` `[B, L]` bool;
    `C̃` `[B, H, d, d]`, `ñ` `[B, H, d]`, `m` `[B, H]` (the true `C = C̃ eᵐ`). Unrolling the
    recurrence, step `t` weighs step `s ≤ t` of its episode by `D_ts = Σ_{s<r≤t} log f_r + ĩ_s` and the carry
    by `g_t = Σ_{r≤t} log f_r + m` (an episode that starts at `r` begins from `m = 0`:
    `g_t = Σ_{r≤j≤t} log f_j`); the stabiliser is `m_t = max(g_t, max_s D_ts)`.
    """
    L = q.shape[2]
    C, n, m = carry
    masked = log_f.masked_fill(starts.unsqueeze(1), float("-inf")).unsqueeze(-1).expand(-1, -1, -1, L)  # [B,H,t,s]
    causal = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
    forget = torch.where(causal.tril(-1), masked, 0.0).cumsum(dim=2)  # Σ_{s<r≤t} log f_r, −∞ across a start
    D = (forget + i_tilde.unsqueeze(2)).masked_fill(~causal, float("-inf"))  # [B, H, L, L]
    keep_m = keep(starts, log_f).transpose(0, 1).unsqueeze(-1)  # [L, B, 1]
    g = linear_scan(keep_m, log_f.permute(2, 0, 1), m).permute(1, 2, 0)  # [B, H, L]
    m_t = torch.maximum(g, D.amax(dim=-1))  # [B, H, L]
    W = torch.exp(D - m_t.unsqueeze(-1))  # [B, H, L, L]
    w0 = torch.exp(g - m_t) * (starts.cumsum(dim=1) == 0).unsqueeze(1)  # the carry's weight: 0 after a start
    S = (q @ k.transpose(-2, -1)) * W
    numerator = S @ v + w0.unsqueeze(-1) * torch.einsum("bhvk,bhtk->bhtv", C, q)
    denominator = S.sum(dim=-1) + w0 * torch.einsum("bhk,bhtk->bht", n, q)
    h = numerator / torch.maximum(denominator.abs(), torch.exp(-m_t)).unsqueeze(-1)
    last, w_last = W[:, :, -1], w0[:, :, -1]  # [B, H, L], [B, H]
    C = torch.einsum("bhs,bhsv,bhsk->bhvk", last, v, k) + w_last[..., None, None] * C
    n = torch.einsum("bhs,bhsk->bhk", last, k) + w_last.unsqueeze(-1) * n
    return h, (C, n, m_t[:, :, -1])


def mlstm_step(q: Tensor, k: Tensor, v: Tensor, i_tilde: Tensor, log_f: Tensor, keep_carry: Tensor,
               carry: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
    """One recurrent step of the stabilised mLSTM (a rollout step), `[B, H, …]` without time; `keep_carry`
    `[B, 1]` is 0 where an episode starts (the carry then is `(0, 0, 0)`, a fresh state)::

        m_t = max(log f_t + m_{t−1}, ĩ_t),   f' = exp(log f_t + m_{t−1} − m_t),   i' = exp(ĩ_t − m_t)
        C̃_t = f' C̃_{t−1} + i' v_t k_tᵀ,   ñ_t = f' ñ_{t−1} + i' k_t,   h̃_t = C̃_t q_t / max(|ñ_tᵀ q_t|, exp(−m_t))
    """
    C, n, m = carry
    m = m * keep_carry
    m_t = torch.maximum(log_f + m, i_tilde)
    forget, write = torch.exp(log_f + m - m_t) * keep_carry, torch.exp(i_tilde - m_t)
    C = forget[..., None, None] * C + write[..., None, None] * v.unsqueeze(-1) * k.unsqueeze(-2)
    n = forget.unsqueeze(-1) * n + write.unsqueeze(-1) * k
    numerator = (C @ q.unsqueeze(-1)).squeeze(-1)
    h = numerator / torch.maximum((n * q).sum(-1).abs(), torch.exp(-m_t)).unsqueeze(-1)
    return h, (C, n, m_t)


class MLSTMLayer(nn.Module):
    """One mLSTM cell (Beck et al. 2024, Sec. 2.3) in a pre-LayerNorm residual block, `H` heads of width `d`::

        u_t = LN(h_t);  q_t = W_q u_t,  k_t = W_k u_t / √d,  v_t = W_v u_t,  o_t = σ(W_o u_t)
        i_t = exp(ĩ_t),  f_t = σ(f̃_t),  [ĩ_t; f̃_t] = W_g u_t + b_g       one input and forget gate per head
        C_t = f_t C_{t−1} + i_t v_t k_tᵀ,   n_t = f_t n_{t−1} + i_t k_t
        h̃_t = C_t q_t / max(|n_tᵀ q_t|, 1)
        h'_t = h_t + W_out (o_t ⊙ h̃_t)

    computed stabilised (`m_t = max(log f_t + m_{t−1}, ĩ_t)`, `mlstm_chunk`). Initialisation (xLSTM's):
    gate weights 0, forget biases evenly spaced over `[3, 6]` across heads (`f ≈ 0.95 … 0.998`), input biases
    `N(0, 0.1²)`.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, chunk_size: int) -> None:
        super().__init__()
        self.sizes = (n_heads, d_head, chunk_size)
        self.norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * n_heads * d_head)
        self.output_gate = nn.Linear(d_model, n_heads * d_head)
        self.gates = nn.Linear(d_model, 2 * n_heads)
        nn.init.zeros_(self.gates.weight)
        with torch.no_grad():
            self.gates.bias[:n_heads].normal_(0.0, 0.1)
            self.gates.bias[n_heads:].copy_(torch.linspace(3.0, 6.0, n_heads))
        self.out = nn.Linear(n_heads * d_head, d_model)

    def forward(self, h: Tensor, carry: Tensor, starts: Tensor) -> tuple[Tensor, Tensor]:
        """`h` `[T, B, D]`, `carry` `[B, H·(d² + d + 1)]` (`C̃`, `ñ`, `m`), `starts` `[T, B]`."""
        H, d, chunk = self.sizes
        T, B = starts.shape
        u = self.norm(h)
        q, k, v = self.qkv(u).view(T, B, 3, H, d).permute(2, 1, 3, 0, 4)  # [B, H, T, d] each
        k = k / math.sqrt(d)
        i_tilde, f_tilde = self.gates(u).view(T, B, 2, H).permute(2, 1, 3, 0)  # [B, H, T] each
        log_f = F.logsigmoid(f_tilde)
        C, n, m = carry.split([H * d * d, H * d, H], dim=-1)
        state = (C.view(B, H, d, d), n.view(B, H, d), m)
        if T == 1:  # a rollout step: the recurrent form
            keep_carry = (~starts[0]).to(h.dtype).unsqueeze(-1)  # [B, 1]
            out, state = mlstm_step(q[:, :, 0], k[:, :, 0], v[:, :, 0], i_tilde[:, :, 0], log_f[:, :, 0],
                                    keep_carry, state)
            h_tilde = out.reshape(1, B, H * d)
        else:
            outputs = []
            for t in range(0, T, chunk):  # the chunks of a long segment, each in parallel form
                part = slice(t, t + chunk)
                out, state = mlstm_chunk(q[:, :, part], k[:, :, part], v[:, :, part], i_tilde[:, :, part],
                                         log_f[:, :, part], starts[part].transpose(0, 1), state)
                outputs.append(out)
            h_tilde = torch.cat(outputs, dim=2).permute(2, 0, 1, 3).reshape(T, B, H * d)
        h = h + self.out(torch.sigmoid(self.output_gate(u)) * h_tilde)
        return h, torch.cat([state[0].flatten(1), state[1].flatten(1), state[2]], dim=-1)


class MatrixLSTM(CarryMemory):
    """An input projection to `d_model` and `n_layers` `MLSTMLayer` blocks (Beck et al. 2024).

    Training runs the parallel form chunk by chunk: within a chunk of `chunk_size` steps, linear attention with a
    cumulative log-forget decay matrix; between chunks, the stabilised carry. The carry is every block's
    `(C̃, ñ, m)`, `[n_layers, H·(d² + d + 1)]`.

    Defaults: xLSTM has no RL setting; four heads (its mLSTM default) over a width of 64, and two blocks, so that
    the second block's gates and keys read the first one's memory: on T-Maze-20 (`configs/demo.yaml`, seed 0) one
    block stayed near a memoryless policy's success of one half through 150k steps, two solved it by 70k. Chunks
    of 64 steps cover a training segment at once.
    """

    @checked(HEADS_DIVIDE_D_MODEL)
    def __init__(self, input_dim: int, *, d_model: Count = 64, n_heads: Count = 4, d_head: CountOrNone = None,
                 n_layers: Count = 2, chunk_size: Count = 64) -> None:
        super().__init__()
        d_head = d_head or d_model // n_heads
        self.embed = nn.Linear(input_dim, d_model)
        self.layers = nn.ModuleList(MLSTMLayer(d_model, n_heads, d_head, chunk_size) for _ in range(n_layers))
        self.output_dim = d_model
        self.record_shape = (n_layers, n_heads * (d_head * d_head + d_head + 1))

    def _run(self, x: Tensor, carry: Tensor, episode_starts: Tensor) -> tuple[Tensor, Tensor]:
        return through_layers(self.layers, self.embed(x), carry, episode_starts)
